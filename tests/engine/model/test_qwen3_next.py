"""Qwen3-Next token-exact against transformers: tiny random checkpoints saved to disk, our loader, greedy ids."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine import kernels
from engine.model.config import ConfigError, parse_config
from engine.ops import gdn
from engine.runner import Runner, StepRow
from lab.drive import Session, greedy_tokens
from lab.gates.oracle import Oracle
from lab.gates.tokens import default_prompts, token_gate
from tests.engine.model.qwen3_next_tiny import CASES, LENS, NEW, NEXT_TINY, next_checkpoint

__all__ = ["next_checkpoint"]  # the fixture, imported


def generate_both(path: Path, dtype: torch.dtype, prompts: list[list[int]]) -> tuple[list, list]:
    ours = greedy_tokens(path, prompts, NEW, dtype)
    oracle = Oracle(path, dtype)
    return ours, [oracle.greedy(p, NEW) for p in prompts]


@pytest.mark.parametrize("name", [c for c in CASES if c != "d128"])
def test_greedy_ids_equal_transformers_generate(next_checkpoint, name: str) -> None:
    path = next_checkpoint(name)
    prompts = default_prompts(211, CASES[name][0], LENS)
    kernels.reset_counts()
    ours, theirs = generate_both(path, torch.float32, prompts)
    result = token_gate(prompts, ours, theirs)
    assert result.passed, result.render()
    assert all(len(set(t)) > 3 for t in ours), ours  # teeth: not one repeated token
    ran = kernels.counts().ran
    # every prompt went through the chunked prefill and every later token through the decode step; a one-token
    # prompt is a decode row of the serving step (its state starts from zero)
    linear_layers = sum(1 for t in parse_config_of(path).gdn.layer_types if t == "linear_attention")
    single = sum(n == 1 for n in LENS)
    assert ran[("gated_delta_chunked", "reference")] == (len(LENS) - single) * linear_layers
    assert ran[("gated_delta_decode", "reference")] == (NEW - 1 + single) * linear_layers


def parse_config_of(path: Path):
    import json

    return parse_config(json.loads((path / "config.json").read_text()))


def test_bfloat16_greedy_ids_equal_transformers(next_checkpoint) -> None:
    path = next_checkpoint("moe-shared-expert")
    prompts = default_prompts(211, 7, LENS)
    ours, theirs = generate_both(path, torch.bfloat16, prompts)
    result = token_gate(prompts, ours, theirs)
    assert result.passed, result.render()


@pytest.mark.parametrize(
    "bug",
    ["norm-without-offset", "conv-state-newest-first", "no-l2norm"],
)
def test_the_token_gate_catches_a_seeded_bug(next_checkpoint, monkeypatch, bug: str) -> None:
    """The gate has teeth: each seeded bug in a Qwen3-Next op makes the greedy ids differ from transformers'."""
    path = next_checkpoint("moe-shared-expert")
    prompts = default_prompts(211, 3, LENS)
    oracle = Oracle(path, torch.float32)
    theirs = [oracle.greedy(p, NEW) for p in prompts]
    if bug == "norm-without-offset":
        from engine.ops.norm import rms_norm

        monkeypatch.setattr(kernels.rms_norm_offset, "reference", rms_norm)
    elif bug == "conv-state-newest-first":
        update = gdn.causal_conv1d_update

        def flipped(x, weight, state):
            out, new = update(x, weight, state.flip(-1))
            return out, new.flip(-1)

        monkeypatch.setattr(kernels.causal_conv1d_update, "reference", flipped)
    else:
        decode = gdn.gated_delta_decode

        def no_l2(*args, **kw):
            return decode(*args, **{**kw, "use_qk_l2norm": False})

        monkeypatch.setattr(kernels.gated_delta_decode, "reference", no_l2)
    ours = greedy_tokens(path, prompts, NEW, torch.float32)
    assert not token_gate(prompts, ours, theirs).passed


def test_config_reads_layer_types_and_the_shapes(next_checkpoint) -> None:
    cfg = parse_config_of(next_checkpoint("interval-3-tied-groups-1"))
    assert cfg.gdn is not None
    assert cfg.gdn.layer_types == ("linear_attention", "linear_attention", "full_attention")
    assert [cfg.has_kv_cache(i) for i in range(3)] == [False, False, True]
    assert cfg.gdn.conv_dim == 2 * 4 * 16 + 4 * 12
    assert cfg.partial_rotary_factor == 0.25 and cfg.is_moe and not cfg.layer_is_sparse(1)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"layer_types": ["linear_attention", "sliding_attention"]}, r"layer_types \['sliding_attention'\] not"),
        ({"layer_types": ["full_attention"]}, "layer_types has 1 entries for num_hidden_layers=2"),
        ({"linear_num_value_heads": 3}, "linear_num_value_heads=3 is not a multiple of linear_num_key_heads=2"),
        ({"rope_parameters": {"rope_theta": 1e4, "partial_rotary_factor": 0.01}}, "gives 0 rotary dims of 16"),
    ],
)
def test_bad_configs_name_the_field(change: dict, message: str) -> None:
    raw = {
        "architectures": ["Qwen3NextForCausalLM"],
        **NEXT_TINY,
        "num_hidden_layers": 2,
        "rope_parameters": {"rope_theta": 1e4, "partial_rotary_factor": 0.25},
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "num_experts": 0,
        "num_experts_per_tok": 1,
        "moe_intermediate_size": 8,
        **change,
    }
    with pytest.raises(ConfigError, match=message):
        parse_config(raw, "cfg.json")


def test_runner_holds_the_state_beside_an_attention_only_kv_cache(next_checkpoint) -> None:
    path = next_checkpoint("moe-shared-expert")
    runner = Runner(path, torch.float32, max_batch=2, max_model_len=64)
    assert [k.shape[0] > 0 for k, _ in runner.kv_caches] == [False, True, False, True]
    state = runner.recurrent
    assert state is not None and sorted(state.ssm) == [0, 2] and state.slots == 3  # two sequences and scratch
    assert state.ssm[0].shape == (3, 4, 16, 12) and state.ssm[0].dtype == torch.float32
    assert state.conv[0].shape == (3, 2 * 2 * 16 + 4 * 12, 4)
    session = Session(runner, [0], [[1, 2, 3]])
    session.prefill()
    session.decode()
    assert state.ssm[0][0].abs().sum() > 0 and state.ssm[0][1].abs().sum() == 0  # only sequence 0's slot
    with pytest.raises(ValueError, match="a serving row has state slot -1, not in 0..1"):
        runner.run_step([StepRow([1, 2], 0, [0])], decode=False)  # serving rows name their state slot


def test_conv_prefill_then_updates_equal_one_prefill(gen=None) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(9, 6, generator=g)
    w = torch.randn(6, 4, generator=g)
    whole, state_whole = gdn.causal_conv1d(x, w)
    head, state = gdn.causal_conv1d(x[:2], w)  # shorter than the kernel: zero padded
    outs = [head]
    part, state = gdn.causal_conv1d(x[2:5], w, state)  # a continued prefill chunk
    outs.append(part)
    for t in range(5, 9):
        out, s = gdn.causal_conv1d_update(x[t : t + 1], w, state[None])
        state = s[0]
        outs.append(out)
    torch.testing.assert_close(torch.cat(outs), whole, rtol=0, atol=1e-6)
    torch.testing.assert_close(state, state_whole, rtol=0, atol=0)
    torch.testing.assert_close(state_whole, x[-4:].T)  # the last kernel inputs, oldest first


def test_layer_types_default_to_every_full_attention_interval_th_layer() -> None:
    raw = {
        "architectures": ["Qwen3NextForCausalLM"],
        **NEXT_TINY,
        "num_hidden_layers": 5,
        "full_attention_interval": 2,
        "rope_parameters": {"rope_theta": 1e4},
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "num_experts": 0,
        "num_experts_per_tok": 1,
        "moe_intermediate_size": 8,
    }
    cfg = parse_config(raw)
    assert cfg.gdn is not None and [cfg.has_kv_cache(i) for i in range(5)] == [False, True, False, True, False]
    assert cfg.partial_rotary_factor == 1.0 and not cfg.layer_is_sparse(0)
