"""On two or more CUDA devices, over NCCL: N=2 gives the greedy tokens of one device (fp32, decode steps
captured per rank), on the tiny dense, MoE and Qwen3-Next models; the CPU twin is test_tensor_parallel.py.

Run on a 2-GPU machine: `.venv/bin/python -m pytest -q tests/engine/test_tensor_parallel_gpu.py`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.engine.model.qwen3_next_tiny import next_checkpoint
from tests.engine.test_tensor_parallel import assert_same_as_one

__all__ = ["next_checkpoint"]  # the fixture, imported
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="tensor parallelism over NCCL needs 2 CUDA devices"),
]


def test_dense_over_nccl(tiny_checkpoint: Callable[..., Path]) -> None:
    assert_same_as_one(tiny_checkpoint("dense", seed=3), 2, device="cuda")


def test_moe_over_nccl(tiny_checkpoint: Callable[..., Path]) -> None:
    assert_same_as_one(tiny_checkpoint("moe", seed=4), 2, device="cuda")


def test_qwen3_next_over_nccl(next_checkpoint: Callable[[str], Path]) -> None:
    assert_same_as_one(next_checkpoint("moe-shared-expert"), 2, device="cuda")
