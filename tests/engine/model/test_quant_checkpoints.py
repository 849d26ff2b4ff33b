"""Quantized checkpoints (AWQ, GPTQ with and without act order, NVFP4 in two layouts) load, dequantize to
their quantizer's own values, and decode token-exact against transformers on the dequantized twin (CPU)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.flags import REFERENCE
from engine.model.config import ConfigError
from engine.model.layers import QuantLinear
from engine.model.loader import LoadError, load_model
from engine.runner import Runner
from lab.data.make_tiny_quant import METHODS, PROJECTIONS
from lab.drive import greedy, greedy_llm, greedy_tokens
from lab.gates.oracle import Oracle
from lab.gates.tokens import default_prompts, token_gate

LENS = (1, 5, 17, 23)
NEW = 12


def copy_checkpoint(src: Path, dst: Path, edit_tensors=None, edit_config=None) -> Path:
    """A copy of `src` with its tensors through `edit_tensors(dict)` and its config through `edit_config(dict)`."""
    shutil.copytree(src, dst)
    if edit_tensors is not None:
        save_file(edit_tensors(load_file(str(src / "model.safetensors"))), str(dst / "model.safetensors"))
    if edit_config is not None:
        config = json.loads((src / "config.json").read_text())
        edit_config(config)
        (dst / "config.json").write_text(json.dumps(config))
    return dst


@pytest.mark.parametrize("method", sorted(METHODS))
def test_dequantized_weights_equal_the_quantizers_values(quant_pair, method: str) -> None:
    quant, dense = quant_pair(method)
    model = load_model(quant, torch.float32)
    twin = load_file(str(dense / "model.safetensors"))
    checked = 0
    for name, module in model.named_modules():
        if isinstance(module, QuantLinear) and name.rsplit(".", 1)[-1] in PROJECTIONS:
            eye = torch.eye(module.in_features)
            w = module(eye, REFERENCE).T  # [out, in]: one-hot rows read the dequantized weight exactly
            want = twin[f"{name}.weight"]
            if method == "nvfp4-ct":  # the stored divisor is inverted once at load: at most 1 ulp apart
                torch.testing.assert_close(w, want, rtol=2**-23, atol=0, msg=name)
            else:
                assert torch.equal(w, want), name
            checked += 1
    assert checked == 2 * len(PROJECTIONS)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("method", sorted(METHODS))
def test_greedy_ids_equal_transformers_on_the_dequantized_twin(quant_pair, method: str, dtype: torch.dtype) -> None:
    quant, dense = quant_pair(method)
    prompts = default_prompts(211, 3, LENS)
    ours = greedy_tokens(quant, prompts, NEW, dtype)
    oracle = Oracle(dense, dtype)
    result = token_gate(prompts, ours, [oracle.greedy(p, NEW) for p in prompts])
    assert result.passed, result.render()
    assert all(len(set(t)) > 3 for t in ours), ours  # not one repeated token: the gate can fail


def test_a_misread_zero_offset_fails_the_gate(quant_pair, tmp_path) -> None:
    # the teeth of the token gate: the v1 checkpoint read as v2 (every zero one lower) changes the tokens
    quant, dense = quant_pair("gptq")
    wrong = copy_checkpoint(
        quant, tmp_path / "v2", edit_config=lambda c: c["quantization_config"].update(checkpoint_format="gptq_v2")
    )
    prompts = default_prompts(211, 3, LENS)
    ours = greedy_tokens(wrong, prompts, NEW, torch.float32)
    oracle = Oracle(dense, torch.float32)
    assert not token_gate(prompts, ours, [oracle.greedy(p, NEW) for p in prompts]).passed


def test_act_order_rows_are_sorted_at_load(quant_pair) -> None:
    quant, _ = quant_pair("gptq-act-order")
    stored = load_file(str(quant / "model.safetensors"))["model.layers.0.self_attn.q_proj.g_idx"]
    assert not bool((stored[1:] >= stored[:-1]).all())  # the checkpoint's g_idx is a shuffle
    layer = load_model(quant, torch.float32).model.layers[0].self_attn.q_proj
    assert bool((layer.g_idx[1:] >= layer.g_idx[:-1]).all())
    assert torch.equal(layer.g_idx, stored[layer.input_perm])
    assert sorted(layer.input_perm.tolist()) == list(range(layer.in_features))


@pytest.mark.parametrize("method", sorted(METHODS))
def test_checkpoint_dtype_is_the_default_and_the_cli_generates(quant_pair, capsys, method: str) -> None:
    from engine.cli import main

    quant, _ = quant_pair(method)
    dtype = torch.bfloat16 if method.startswith("nvfp4") else torch.float16  # what make_tiny_quant writes
    assert Runner(quant, None, max_batch=1, max_model_len=16).dtype == dtype
    assert main(["generate", "--model", str(quant), "--prompt-ids", "1,2,3", "--max-new-tokens", "4", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["tokens"][0]) == 4


def test_max_position_embeddings_is_checked(quant_pair, capsys) -> None:
    from engine.cli import main

    quant, _ = quant_pair("awq")
    with pytest.raises(ValueError, match=r"max_model_len=300 exceeds the model's max_position_embeddings=256"):
        Runner(quant, max_model_len=300)
    assert Runner(quant, max_batch=1).max_model_len == 256  # the default stays within the model
    assert main(["generate", "--model", str(quant), "--prompt-ids", "1,2", "--max-new-tokens", "255"]) == 2
    assert (  # in the command line's terms: the CLI sets max_model_len itself
        "a 2-token prompt and --max-tokens 255 need 258 positions; the model has 256 (max_position_embeddings): "
        "pass --max-tokens 253 or fewer"
    ) in capsys.readouterr().err


Q = "model.layers.0.self_attn.q_proj"
BAD_TENSORS = {
    "wrong-shape": (
        "awq",
        lambda t: {**t, f"{Q}.qweight": t[f"{Q}.qweight"][:-8]},
        rf"{Q}.qweight: checkpoint shape \(40, 8\) != \(48, 8\) for in_features=48, out_features=64",
    ),
    "missing-scales": (
        "gptq",
        lambda t: {k: v for k, v in t.items() if k != f"{Q}.scales"},
        rf"{Q}.scales: missing from the checkpoint",
    ),
    "wrong-dtype": (
        "gptq",
        lambda t: {**t, f"{Q}.qzeros": t[f"{Q}.qzeros"].float()},
        rf"{Q}.qzeros: dtype torch.float32 is not torch.int32",
    ),
    "g_idx-out-of-range": (
        "gptq-act-order",
        lambda t: {**t, f"{Q}.g_idx": t[f"{Q}.g_idx"] + 1},
        rf"{Q}.g_idx: values span \[1, 3\] outside the 3 groups",
    ),
    "missing-global-scale": (
        "nvfp4",
        lambda t: {k: v for k, v in t.items() if k != f"{Q}.weight_scale_2"},
        rf"{Q}.weight_scale_2: missing from the checkpoint",
    ),
    "unknown-tensor": (
        "awq",
        lambda t: {**t, f"{Q}.g_idx": torch.zeros(48, dtype=torch.int32)},
        rf"{Q}.g_idx: not a tensor of this AWQ 4-bit group 16 linear layer",
    ),
    "quantized-head": (
        "awq",
        lambda t: {**t, "lm_head.qweight": t[f"{Q}.qweight"].clone()},
        r"lm_head.qweight: a quantized tensor, but the engine keeps this module unquantized",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_TENSORS))
def test_bad_checkpoint_tensors_name_the_tensor(quant_pair, tmp_path, case: str) -> None:
    method, edit, message = BAD_TENSORS[case]
    bad = copy_checkpoint(quant_pair(method)[0], tmp_path / case, edit_tensors=edit)
    with pytest.raises(LoadError, match=message):
        load_model(bad, torch.float32)


BAD_CONFIGS = {
    "unknown-bits": ("gptq", {"bits": 3}, r"quantization_config.bits=3 is not supported for gptq \(2, 4 or 8\)"),
    "awq-bits": ("awq", {"bits": 8}, r"quantization_config.bits=8 is not supported for awq \(only 4\)"),
    "awq-gemv-layout": ("awq", {"version": "gemv"}, r"quantization_config.version='gemv' is not supported"),
    "unknown-method": (
        "awq",
        {"quant_method": "bitsandbytes"},
        r"quantization_config.quant_method='bitsandbytes' is not supported",
    ),
    "gptq-format": (
        "gptq",
        {"checkpoint_format": "marlin"},
        r"quantization_config.checkpoint_format='marlin' is not supported",
    ),
    "nvfp4-algo": ("nvfp4", {"quant_algo": "FP8"}, r"quantization_config.quant_algo='FP8' is not supported"),
    "nvfp4-kv-cache": (
        "nvfp4",
        {"kv_cache_quant_algo": "FP8"},
        r"quantization_config.kv_cache_quant_algo='FP8' is not supported",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_quantization_configs_name_the_field(quant_pair, tmp_path, case: str) -> None:
    method, edit, message = BAD_CONFIGS[case]
    bad = copy_checkpoint(
        quant_pair(method)[0], tmp_path / case, edit_config=lambda c: c["quantization_config"].update(edit)
    )
    with pytest.raises(ConfigError, match=message):
        load_model(bad, torch.float32)


def test_quantized_tensors_without_a_quantization_config_say_so(quant_pair, tmp_path) -> None:
    bad = copy_checkpoint(quant_pair("awq")[0], tmp_path / "noconf", edit_config=lambda c: c.pop("quantization_config"))
    with pytest.raises(LoadError, match=r"qweight: a quantized tensor, but config.json has no quantization_config"):
        load_model(bad, torch.float32)


def test_a_projection_the_checkpoint_left_dense_loads_dense(quant_pair, tmp_path) -> None:
    # modules_to_not_convert / exclude_modules: the layer takes a plain `weight` and runs the dense linear
    quant, dense = quant_pair("awq")
    twin = load_file(str(dense / "model.safetensors"))

    def unquantize_q(t: dict) -> dict:
        t = {k: v for k, v in t.items() if not k.startswith(f"{Q}.")}
        return {**t, f"{Q}.weight": twin[f"{Q}.weight"]}

    mixed = copy_checkpoint(quant, tmp_path / "mixed", edit_tensors=unquantize_q)
    layer = load_model(mixed, torch.float32).model.layers[0].self_attn.q_proj
    assert layer.weight is not None and torch.equal(layer.weight, twin[f"{Q}.weight"])
    x = torch.randn(3, layer.in_features)
    assert torch.equal(layer(x, REFERENCE), torch.nn.functional.linear(x, twin[f"{Q}.weight"]))


@pytest.mark.parametrize("gate", ["tokens", "neartie"])
def test_the_gates_hold_a_quantized_model_to_its_twin(quant_pair, capsys, gate: str) -> None:
    from lab.cli import main

    quant, dense = quant_pair("gptq-act-order")
    argv = [
        "gate",
        gate,
        "--model",
        str(quant),
        "--oracle-model",
        str(dense),
        "--dtype",
        "float32",
        "--max-new-tokens",
        "6",
        "--json",
    ]
    assert main(argv) == 0, capsys.readouterr()
    assert json.loads(capsys.readouterr().out)["verdict"] == "PASS"


def test_quantized_moe_experts_are_refused_by_name(tiny_checkpoint, tmp_path) -> None:
    src = tiny_checkpoint("moe", 0)
    expert = "model.layers.0.mlp.experts.0.gate_proj"

    def quantize_one_expert(t: dict) -> dict:
        return {**t, f"{expert}.qweight": torch.zeros(48, 5, dtype=torch.int32)}

    bad = copy_checkpoint(
        src,
        tmp_path / "moe-awq",
        edit_tensors=quantize_one_expert,
        edit_config=lambda c: c.update(quantization_config={"quant_method": "awq", "bits": 4, "group_size": 16}),
    )
    with pytest.raises(
        LoadError,
        match=rf"{expert}.qweight: a quantized tensor, but the engine keeps this module "
        r"unquantized \(MoE experts",
    ):
        load_model(bad, torch.float32)


def test_sorted_act_order_rows_without_the_input_permutation_fail_the_gate(quant_pair) -> None:
    # seeded bug: rows sorted by g_idx but x left in checkpoint order
    quant, dense = quant_pair("gptq-act-order")
    prompts = default_prompts(211, 3, LENS)
    llm = greedy_llm(quant, torch.float32, "cpu", prompts, NEW)
    dropped = 0
    for module in llm.runner.model.modules():
        if isinstance(module, QuantLinear) and module.input_perm is not None:
            module.input_perm = None
            dropped += 1
    assert dropped == 2 * len(PROJECTIONS)
    oracle = Oracle(dense, torch.float32)
    ours = greedy(llm, prompts, NEW)
    assert not token_gate(prompts, ours, [oracle.greedy(p, NEW) for p in prompts]).passed
