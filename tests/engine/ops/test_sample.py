"""Tests for engine.ops.sample: greedy argmax semantics and seeded top-k/top-p sampling."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch

from engine import kernels
from engine.flags import REFERENCE

# the table with every kernel off: its entry checks, then the pure-torch reference
greedy_argmax = partial(kernels.greedy_argmax, REFERENCE)
sample_top_k_top_p = partial(kernels.sample_top_k_top_p, REFERENCE)


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


def loop_allowed(row: list[float], k: int, p: float) -> set[int]:
    """The top-k then top-p set of one row, in float64 python."""
    n = len(row)
    order = sorted(range(n), key=lambda i: -row[i])
    kept = order if k <= 0 or k >= n else [i for i in order if row[i] >= row[order[k - 1]]]
    if p >= 1:
        return set(kept)
    exps = {i: math.exp(row[i] - row[order[0]]) for i in kept}
    total = sum(exps.values())
    mass, chosen = 0.0, []
    for i in kept:
        chosen.append(i)
        mass += exps[i] / total
        if mass >= p:
            break
    floor = exps[chosen[-1]]
    return {i for i in kept if exps[i] >= floor}


def draws(logits, k, p, t, seed, reps):
    gen = torch.Generator().manual_seed(seed)
    batch = logits.shape[0]
    return sample_top_k_top_p(logits.repeat(reps, 1), k, p, t, gen).view(reps, batch)  # [reps, batch]


def test_same_seed_same_tokens(dtype, gen):
    logits = torch.randn(7, 83, generator=gen).to(dtype)
    a, b = draws(logits, 19, 0.9, 0.7, 1234, 5), draws(logits, 19, 0.9, 0.7, 1234, 5)
    assert torch.equal(a, b) and a.dtype == torch.int64
    assert not torch.equal(a, draws(logits, 19, 0.9, 0.7, 4321, 5))


@pytest.mark.parametrize("k,p,t", [(7, 1.0, 1.0), (0, 0.6, 1.0), (19, 0.8, 0.5), (83, 0.3, 2.0)])
def test_tokens_outside_the_kept_set_are_never_drawn(k, p, t, dtype, gen):
    logits = (2 * torch.randn(5, 83, generator=gen)).to(dtype)
    drawn = draws(logits, k, p, t, 99, 300)
    rows = (logits.double() / t).tolist()
    for r in range(5):
        allowed = loop_allowed(rows[r], k, p)
        seen = set(drawn[:, r].tolist())
        assert seen <= allowed, f"row {r}: drew {sorted(seen - allowed)} outside the kept set"
        assert len(allowed) == 1 or len(seen) > 1  # it really samples


def test_draw_frequencies_follow_the_renormalised_softmax(gen):
    logits = torch.tensor([[2.0, 1.5, 1.0, 0.2, -1.0, -3.0, 0.9]])
    n = 4000
    drawn = draws(logits, 5, 1.0, 1.0, 7, n)[:, 0]
    kept = [0, 1, 2, 3, 6]  # the top 5 logits
    exps = [math.exp(float(logits[0, i])) for i in kept]
    for i, e in zip(kept, exps):
        expected = e / sum(exps)
        freq = float((drawn == i).float().mean())
        assert abs(freq - expected) < 4 * math.sqrt(expected * (1 - expected) / n), (i, freq, expected)
    assert int(((drawn == 4) | (drawn == 5)).sum()) == 0


def test_top_k_one_and_tiny_top_p_are_argmax(dtype, gen):
    logits = torch.randn(19, 111, generator=gen).to(dtype)
    expected = torch.argmax(logits, dim=-1)
    g = torch.Generator().manual_seed(5)
    assert torch.equal(sample_top_k_top_p(logits, 1, 1.0, 1.0, g), expected)
    assert torch.equal(sample_top_k_top_p(logits, 0, 1e-6, 1.0, g), expected)


def test_per_row_parameters(gen):
    logits = torch.randn(3, 19, generator=gen)
    g = torch.Generator().manual_seed(3)
    ks, ps, ts = torch.tensor([1, 0, 1]), torch.tensor([1.0, 1.0, 0.5]), torch.tensor([1.0, 0.5, 2.0])
    out = sample_top_k_top_p(logits, ks, ps, ts, g)
    assert out[0] == torch.argmax(logits[0]) and out[2] == torch.argmax(logits[2])


def test_sampling_rejects_bad_parameters(gen):
    logits = torch.randn(2, 7, generator=gen)
    g = torch.Generator()
    with pytest.raises(ValueError, match="temperature: must be > 0"):
        sample_top_k_top_p(logits, 3, 0.9, 0.0, g)
    with pytest.raises(ValueError, match=r"top_p: must be in \(0, 1\]"):
        sample_top_k_top_p(logits, 3, 1.5, 1.0, g)
    with pytest.raises(TypeError, match="generator: expected a CPU torch.Generator"):
        sample_top_k_top_p(logits, 3, 0.9, 1.0, 1234)
    with pytest.raises(ValueError, match=r"top_k: expected shape \(2,\)"):
        sample_top_k_top_p(logits, torch.tensor([1, 2, 3]), 0.9, 1.0, g)
