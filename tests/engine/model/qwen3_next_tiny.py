"""Tiny random Qwen3-Next checkpoints for the model tests (CPU and GPU), saved with transformers' save_pretrained."""

from __future__ import annotations

from pathlib import Path

import pytest

# The conftest's tiny shape; four layers, gated delta net and full attention alternating (the builder's NEXT)
NEXT_TINY = dict(
    vocab_size=211,
    hidden_size=48,
    intermediate_size=88,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=256,
    linear_key_head_dim=16,
    linear_value_head_dim=12,
)
# 70 crosses the 64-token chunk of the chunked prefill; the 12 new tokens after 58 cross position 64 while decoding
LENS = (1, 5, 23, 58, 70)
NEW = 12
CASES = {
    "moe-shared-expert": (0, {}),
    "dense-mlp-rope-half": (1, {"num_experts": 0, "partial_rotary_factor": 0.5}),
    # Qwen3-Next's own head sizes (128) in the delta net and the attention: the GPU tests' second model
    "d128": (
        3,
        {
            "hidden_size": 128,
            "head_dim": 128,
            "linear_key_head_dim": 128,
            "linear_value_head_dim": 128,
            "linear_num_key_heads": 1,
            "linear_num_value_heads": 2,
        },
    ),
    "interval-3-tied-groups-1": (
        2,
        {
            "layer_types": None,
            "full_attention_interval": 3,
            "num_hidden_layers": 3,
            "tie_word_embeddings": True,
            "linear_num_key_heads": 4,
            "mlp_only_layers": [1],
        },
    ),
}


def save_next(path: Path, seed: int, **overrides: object) -> Path:
    from lab.data.make_tiny import build_next

    rope = {"rope_type": "default", "rope_theta": 10000.0}
    if "partial_rotary_factor" in overrides:
        rope["partial_rotary_factor"] = overrides.pop("partial_rotary_factor")  # type: ignore[assignment]
    config = {**NEXT_TINY, "rope_parameters": rope, **overrides}  # layer_types None: from full_attention_interval
    build_next(seed, **config).save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def next_checkpoint(tmp_path_factory: pytest.TempPathFactory):
    cache: dict[str, Path] = {}

    def make(name: str) -> Path:
        if name not in cache:
            seed, overrides = CASES[name]
            cache[name] = save_next(tmp_path_factory.mktemp(name), seed, **dict(overrides))
        return cache[name]

    return make
