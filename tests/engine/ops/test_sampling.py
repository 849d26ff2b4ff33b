"""Tests for engine.ops.sampling: greedy argmax semantics and seeded top-k/top-p sampling."""
from __future__ import annotations

import math

import pytest
import torch

from engine.ops.sampling import greedy_argmax


def loop_argmax(row: list[float]) -> int:
    """First NaN if any, else the lowest index of the maximum."""
    for i, x in enumerate(row):
        if math.isnan(x):
            return i
    best = 0
    for i, x in enumerate(row):
        if x > row[best]:
            best = i
    return best


def test_greedy_argmax_ties_and_nan(dtype, gen):
    batch, vocab = 7, 83
    logits = torch.randn(batch, vocab, generator=gen)
    logits[1, [5, 40, 82]] = 50.0  # three-way tie: lowest index
    logits[2, [80, 3]] = 60.0
    logits[3, 11] = float("nan")
    logits[4, [30, 9]] = float("nan")  # first NaN wins
    logits[4, 0] = float("inf")
    logits[5] = 2.0  # all equal: index 0
    logits[6, [3, 4]] = float("inf")
    logits = logits.to(dtype)
    ids = greedy_argmax(logits)
    assert ids.dtype == torch.int64 and ids.shape == (batch,)
    assert torch.equal(ids, torch.argmax(logits, dim=-1))
    assert ids.tolist() == [loop_argmax(r) for r in logits.float().tolist()]
    assert ids[1:7].tolist() == [5, 3, 11, 9, 0, 3]


def test_greedy_argmax_rejects_bad_shapes():
    with pytest.raises(ValueError, match="logits: expected 2 dims"):
        greedy_argmax(torch.randn(7))
    with pytest.raises(ValueError, match="logits: vocab dim is empty"):
        greedy_argmax(torch.randn(3, 0))
