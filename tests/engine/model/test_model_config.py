"""Parsing HF Qwen3 / Qwen3-MoE config.json: both rope spellings, MoE fields, sliding windows, errors."""

from __future__ import annotations

import json

import pytest

from engine.model.config import ConfigError, load_config, parse_config

DENSE = {
    "architectures": ["Qwen3ForCausalLM"],
    "vocab_size": 151,
    "hidden_size": 40,
    "intermediate_size": 72,
    "num_hidden_layers": 5,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
}


def test_transformers4_spelling_top_level_rope_theta_and_default_head_dim() -> None:
    cfg = parse_config({**DENSE, "rope_theta": 1234.5})
    assert (cfg.rope_theta, cfg.head_dim, cfg.num_key_value_heads) == (1234.5, 10, 2)
    assert cfg.tie_word_embeddings and not cfg.is_moe
    assert cfg.sliding_windows == (None,) * 5


def test_transformers5_spelling_rope_parameters() -> None:
    cfg = parse_config({**DENSE, "head_dim": 16, "rope_parameters": {"rope_type": "default", "rope_theta": 5e5}})
    assert (cfg.rope_theta, cfg.head_dim) == (5e5, 16)


def test_kv_heads_default_to_attention_heads() -> None:
    raw = {k: v for k, v in DENSE.items() if k != "num_key_value_heads"}
    assert parse_config({**raw, "rope_theta": 1e4}).num_key_value_heads == 4


@pytest.mark.parametrize("key", ["num_experts", "num_local_experts"])
def test_moe_fields_both_expert_count_spellings(key: str) -> None:
    raw = {
        **DENSE,
        "architectures": ["Qwen3MoeForCausalLM"],
        "rope_theta": 1e4,
        key: 7,
        "num_experts_per_tok": 3,
        "moe_intermediate_size": 24,
        "norm_topk_prob": True,
        "decoder_sparse_step": 2,
        "mlp_only_layers": [3],
    }
    cfg = parse_config(raw)
    assert (cfg.num_experts, cfg.num_experts_per_tok, cfg.moe_intermediate_size) == (7, 3, 24)
    # sparse on (layer + 1) % 2 == 0, except the mlp-only layer 3
    assert [cfg.layer_is_sparse(i) for i in range(5)] == [False, True, False, False, False]


def test_sliding_window_rules() -> None:
    base = {**DENSE, "rope_theta": 1e4, "sliding_window": 9}
    assert parse_config(base).sliding_windows == (None,) * 5  # use_sliding_window off: HF drops it
    on = {**base, "use_sliding_window": True, "max_window_layers": 3}
    assert parse_config(on).sliding_windows == (None, None, None, 9, 9)
    typed = {**on, "layer_types": ["sliding_attention", "full_attention"] * 2 + ["full_attention"]}
    assert parse_config(typed).sliding_windows == (9, None, 9, None, None)
    moe = {
        **on,
        "architectures": ["Qwen3MoeForCausalLM"],
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 8,
    }
    assert parse_config(moe).sliding_windows == (9,) * 5


@pytest.mark.parametrize(
    "raw, message",
    [
        (
            {**DENSE, "architectures": ["LlamaForCausalLM"], "rope_theta": 1e4},
            "architectures=['LlamaForCausalLM'] is not supported",
        ),
        ({**DENSE}, "required field 'rope_theta'"),
        ({**DENSE, "rope_theta": 1e4, "hidden_size": None}, "required field 'hidden_size' is missing"),
        ({**DENSE, "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4}}, "rope_type='yarn' is not supported"),
        ({**DENSE, "rope_theta": 1e4, "num_key_value_heads": 3}, "not a multiple of num_key_value_heads=3"),
        (
            {
                **DENSE,
                "architectures": ["Qwen3MoeForCausalLM"],
                "rope_theta": 1e4,
                "num_experts_per_tok": 2,
                "moe_intermediate_size": 8,
            },
            "'num_experts' (or 'num_local_experts') is missing",
        ),
    ],
)
def test_bad_configs_name_the_field(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError, match="config.json") as err:
        parse_config(raw)
    assert message in str(err.value)


def test_load_config_names_the_file(tmp_path) -> None:
    with pytest.raises(ConfigError, match=f"{tmp_path}/config.json: no config.json"):
        load_config(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**DENSE, "rope_theta": 1e4}))
    assert load_config(tmp_path).vocab_size == 151


def test_quantization_configs_as_transformers_and_vllm_read_them() -> None:
    from engine.model.config import QuantConfig

    base = {**DENSE, "rope_theta": 1e4}
    awq = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "GEMM"}
    assert parse_config({**base, "quantization_config": awq}).quant == QuantConfig("awq", 4, 128, sym=False)
    gptq = {
        "quant_method": "gptq",
        "bits": 8,
        "group_size": -1,
        "desc_act": True,
        "sym": False,
        "checkpoint_format": "gptq_v2",
    }
    assert parse_config({**base, "quantization_config": gptq}).quant == QuantConfig(
        "gptq", 8, 0, desc_act=True, sym=False, version=2
    )
    nested = {"quant_method": "modelopt", "quantization": {"quant_algo": "NVFP4", "group_size": 16}}
    assert parse_config({**base, "quantization_config": nested}).quant == QuantConfig(
        "nvfp4", group_size=16, layout="modelopt"
    )
    assert parse_config(base).quant is None


def test_modelopt_side_file_is_read_when_config_json_has_none(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({**DENSE, "rope_theta": 1e4}))
    (tmp_path / "hf_quant_config.json").write_text(
        json.dumps({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4", "group_size": 16}})
    )
    quant = load_config(tmp_path).quant
    assert quant is not None and (quant.method, quant.layout) == ("nvfp4", "modelopt")


@pytest.mark.parametrize(("dtype", "want"), [("bfloat16", "bfloat16"), (None, "float32"), ("float16", "float16")])
def test_auto_dtype_is_the_checkpoints(dtype: str | None, want: str) -> None:
    from engine.model.config import checkpoint_dtype

    assert checkpoint_dtype(parse_config({**DENSE, "rope_theta": 1e4, "torch_dtype": dtype})) == want


def test_an_unrunnable_checkpoint_dtype_says_pass_dtype() -> None:
    from engine.model.config import checkpoint_dtype

    with pytest.raises(ConfigError, match=r"torch_dtype='float64' is not one the engine runs .*; pass --dtype"):
        checkpoint_dtype(parse_config({**DENSE, "rope_theta": 1e4, "torch_dtype": "float64"}))
