"""Fixtures for the model, runner and gate tests: tiny random HF Qwen3 / Qwen3-MoE checkpoints built offline."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

# Tiny models on a shared 2-core machine: one intra-op thread is much faster than two
# spinning against each other, and does not change any result these tests compare.
torch.set_num_threads(1)

# small and odd sizes; 2 layers so the residual path between layers is exercised
TINY = dict(
    vocab_size=211,
    hidden_size=48,
    intermediate_size=88,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=256,
)
MOE = dict(num_experts=5, num_experts_per_tok=2, moe_intermediate_size=40)


def save_tiny(path: Path, kind: str, seed: int, **overrides: object) -> Path:
    """Build a random `kind` ("dense" or "moe") model with transformers and save_pretrained it to `path`."""
    from lab.data.make_tiny import build, build_moe

    config = {**TINY, **overrides}
    model = build(seed, **config) if kind == "dense" else build_moe(seed, **{**MOE, **config})
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """A cached factory: tiny_checkpoint("moe", seed=1, tie_word_embeddings=True) -> its directory."""
    cache: dict[tuple, Path] = {}

    def make(kind: str, seed: int = 0, **overrides: object) -> Path:
        key = (kind, seed, repr(sorted(overrides.items())))
        if key not in cache:
            cache[key] = save_tiny(tmp_path_factory.mktemp(f"{kind}{seed}"), kind, seed, **overrides)
        return cache[key]

    return make


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    from engine.llm import TINY_MODEL

    return TINY_MODEL
