"""Fixtures of the model tests: tiny quantized checkpoints and their dequantized twins, built offline."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

# the conftest's tiny shape, with an intermediate size NVFP4's blocks of 16 divide
QUANT_TINY = {
    "vocab_size": 211,
    "hidden_size": 48,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 256,
}


@pytest.fixture(scope="session")
def quant_pair(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[Path, Path]]:
    """quant_pair("awq") -> (quantized dir, dequantized twin dir), built once per method."""
    from lab.data.make_tiny import build
    from lab.data.make_tiny_quant import write_pair

    cache: dict[str, tuple[Path, Path]] = {}

    def make(method: str) -> tuple[Path, Path]:
        if method not in cache:
            cache[method] = write_pair(build(5, **QUANT_TINY), method, tmp_path_factory.mktemp(method))
        return cache[method]

    return make
