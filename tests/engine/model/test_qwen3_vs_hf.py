"""Token-exact against transformers: save_pretrained tiny random Qwen3 / Qwen3-MoE, our loader, greedy ids."""

from __future__ import annotations

import pytest
import torch

from lab.drive import greedy_tokens
from lab.gates.oracle import Oracle
from lab.gates.tokens import default_prompts, token_gate

LENS = (1, 5, 17, 23)  # different lengths; 17 and 23 cross the 16-token KV block while decoding past 32
NEW = 12

CASES = {
    "dense-s0": ("dense", 0, {}),
    "dense-s1": ("dense", 1, {}),
    "dense-s2-tied": ("dense", 2, {"tie_word_embeddings": True}),
    "dense-s3-window": ("dense", 3, {"use_sliding_window": True, "sliding_window": 6, "max_window_layers": 1}),
    "moe-s0": ("moe", 0, {}),
    "moe-s1-mlp-only": ("moe", 1, {"mlp_only_layers": [0], "norm_topk_prob": False}),
}


def generate_both(path, dtype: torch.dtype, prompts: list[list[int]]) -> tuple[list, list]:
    ours = greedy_tokens(path, prompts, NEW, dtype)
    oracle = Oracle(path, dtype)
    return ours, [oracle.greedy(p, NEW) for p in prompts]


@pytest.mark.parametrize("name", list(CASES))
def test_greedy_ids_equal_transformers_generate(tiny_checkpoint, name: str) -> None:
    kind, seed, overrides = CASES[name]
    path = tiny_checkpoint(kind, seed, **overrides)
    prompts = default_prompts(211, seed, LENS)
    ours, theirs = generate_both(path, torch.float32, prompts)
    result = token_gate(prompts, ours, theirs)
    assert result.passed, result.render()
    assert [len(t) for t in ours] == [NEW] * len(LENS)
    # the gate has teeth: the continuations are not one repeated token
    assert all(len(set(t)) > 3 for t in ours), ours


@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_bfloat16_greedy_ids_equal_transformers(tiny_checkpoint, kind: str) -> None:
    path = tiny_checkpoint(kind, 0)
    prompts = default_prompts(211, 7, LENS)
    ours, theirs = generate_both(path, torch.bfloat16, prompts)
    result = token_gate(prompts, ours, theirs)
    assert result.passed, result.render()
