"""Tests for engine.ops.splitkv: per-split partials and the fp32 log-sum-exp combine."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch

from engine import kernels
from engine.flags import REFERENCE
from engine.ops.splitkv import splitkv_combine, splitkv_partial

from .test_paged_attn import make_paged, reference_attention

# the table with every kernel off: its entry checks, then the pure-torch reference
paged_decode_attention = partial(kernels.paged_decode_attention, REFERENCE)


def paged_case(dtype, gen, ctx=(1, 7, 19, 33), hq=6, hkv=2, d=38, block_size=4):
    k_seqs = [torch.randn(c, hkv, d, generator=gen).to(dtype) for c in ctx]
    v_seqs = [torch.randn(c, hkv, d, generator=gen).to(dtype) for c in ctx]
    k_cache, v_cache, tables, lens = make_paged(k_seqs, v_seqs, block_size, 23, gen)
    q = torch.randn(len(ctx), hq, d, generator=gen).to(dtype)
    return q, k_cache, v_cache, tables, lens, k_seqs, v_seqs


@pytest.mark.parametrize("num_splits", range(1, 9))
@pytest.mark.parametrize("window", [None, 6])
def test_partial_and_combine_equal_paged_decode(num_splits, window, dtype, gen, close):
    q, k_cache, v_cache, tables, lens, k_seqs, v_seqs = paged_case(dtype, gen)
    scale = q.shape[-1] ** -0.5
    out, lse = splitkv_partial(q, k_cache, v_cache, tables, lens, scale, num_splits, window)
    assert out.shape == (4, num_splits, 6, 38) and lse.shape == (4, num_splits, 6)
    assert out.dtype == lse.dtype == torch.float32
    combined = splitkv_combine(out, lse, dtype)
    assert combined.dtype == dtype
    close(combined, paged_decode_attention(q, k_cache, v_cache, tables, lens, scale, window), dtype, "reduction")
    for b, c in enumerate(lens.tolist()):
        expected = reference_attention(q[b : b + 1], k_seqs[b], v_seqs[b], [c - 1], window)[0]
        # fp32 everywhere but the final rounding: tighter than the eager reference in bf16
        close(combined[b], expected, dtype, "elementwise" if dtype == torch.float32 else "reduction")


def test_empty_splits_have_minus_inf_lse_and_zero_output(gen):
    # one block of context (ctx 3, block 4) over 5 splits: splits 1..4 are empty
    q, k_cache, v_cache, tables, lens, *_ = paged_case(torch.float32, gen, ctx=(3, 9))
    out, lse = splitkv_partial(q, k_cache, v_cache, tables, lens, 0.3, 5)
    assert torch.isneginf(lse[0, 1:]).all() and torch.isfinite(lse[0, 0]).all()
    assert torch.equal(out[0, 1:], torch.zeros_like(out[0, 1:]))
    # ctx 9 = 3 blocks over 5 splits of one block each: splits 3, 4 empty
    assert torch.isfinite(lse[1, :3]).all() and torch.isneginf(lse[1, 3:]).all()
    # a window of 1 leaves only position 8, in the third block: the first two splits are empty
    out_w, lse_w = splitkv_partial(q, k_cache, v_cache, tables, lens, 0.3, 5, sliding_window=1)
    assert torch.isneginf(lse_w[1, :2]).all() and torch.isfinite(lse_w[1, 2]).all()
    assert torch.equal(out_w[1, :2], torch.zeros_like(out_w[1, :2]))


def test_split_lse_is_the_log_sum_exp_of_its_scores(gen):
    q, k_cache, v_cache, tables, lens, k_seqs, _ = paged_case(torch.float32, gen, ctx=(19,), hq=2, hkv=1)
    out, lse = splitkv_partial(q, k_cache, v_cache, tables, lens, 0.25, 3)
    # 5 blocks over 3 splits: 2 blocks (8 positions) per split -> [0, 8), [8, 16), [16, 19)
    for s, (lo, hi) in enumerate([(0, 8), (8, 16), (16, 19)]):
        for h in range(2):
            scores = [0.25 * float(k_seqs[0][p, 0].double() @ q[0, h].double()) for p in range(lo, hi)]
            expected = math.log(sum(math.exp(x) for x in scores))
            assert math.isclose(float(lse[0, s, h]), expected, rel_tol=1e-5, abs_tol=1e-5)


def test_combine_rejects_bad_input():
    out = torch.zeros(2, 3, 4, 5)
    with pytest.raises(ValueError, match="lse: dim 1 is 2 but out_partial's dim 1 is 3"):
        splitkv_combine(out, torch.zeros(2, 2, 4), torch.float32)
    with pytest.raises(ValueError, match="lse: a \\(batch, head\\) has no non-empty split"):
        splitkv_combine(out, torch.full((2, 3, 4), float("-inf")), torch.float32)
    with pytest.raises(TypeError, match="out_partial: dtype bfloat16"):
        splitkv_combine(out.bfloat16(), torch.zeros(2, 3, 4), torch.float32)
