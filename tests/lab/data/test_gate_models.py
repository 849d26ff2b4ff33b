"""Every gate model, sliding-window layer included, token-exact against transformers on the CPU (fp32 and bf16)."""

from __future__ import annotations

import json

import pytest
import torch

from engine.model.config import load_config
from lab.data.gate_models import GATE_MODELS, WINDOW, write_gate_models
from lab.drive import greedy, greedy_llm, greedy_tokens
from lab.gates.oracle import Oracle
from lab.gates.tokens import default_prompts, token_gate

# contexts past the window (40) and across 16-token blocks
LENS = (3, 37, 58)
NEW = 20


@pytest.fixture(scope="module")
def gate_dirs(tmp_path_factory):
    return write_gate_models(tmp_path_factory.mktemp("gate-models"))


def test_shapes_cover_every_head_dim_and_group() -> None:
    assert {m.head_dim for m in GATE_MODELS.values()} == {64, 128, 256}
    assert {m.group for m in GATE_MODELS.values()} >= {1, 2, 4, 8, 16}
    assert min(GATE_MODELS["long"].prompt_lens) > 1500


@pytest.mark.parametrize("name", [n for n in GATE_MODELS if n != "long"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_gate_model_is_token_exact(gate_dirs, name: str, dtype: torch.dtype) -> None:
    path = gate_dirs[name]
    config = load_config(path)
    assert config.sliding_windows == (None, WINDOW, None)
    assert json.loads((path / "config.json").read_text())["layer_types"][1] == "sliding_attention"
    prompts = default_prompts(config.vocab_size, 3, LENS)
    ours = greedy_tokens(path, prompts, NEW, dtype)
    oracle = Oracle(path, dtype)
    result = token_gate(prompts, ours, [oracle.greedy(p, NEW) for p in prompts])
    assert result.passed, result.render()
    assert all(len(set(t)) > 3 for t in ours), ours  # the gate has teeth: not one repeated token


def test_long_model_is_token_exact_past_its_window(gate_dirs) -> None:
    path = gate_dirs["long"]
    prompts = default_prompts(load_config(path).vocab_size, 4, (700, 45))
    ours = greedy_tokens(path, prompts, 6, torch.float32)
    oracle = Oracle(path, torch.float32)
    result = token_gate(prompts, ours, [oracle.greedy(p, 6) for p in prompts])
    assert result.passed, result.render()


def test_window_matters(gate_dirs) -> None:
    """Without its window the model's greedy ids change: the window is not a no-op on these prompts."""
    path = gate_dirs["d128-g4"]
    prompts = default_prompts(load_config(path).vocab_size, 3, LENS)
    with_window = greedy_tokens(path, prompts, NEW, torch.float32)
    llm = greedy_llm(path, torch.float32, "cpu", prompts, NEW)
    for layer in llm.runner.model.model.layers:
        layer.self_attn.sliding_window = None
    assert greedy(llm, prompts, NEW) != with_window
