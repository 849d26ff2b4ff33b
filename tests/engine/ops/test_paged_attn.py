"""Tests for engine.ops.paged_attn: packed causal prefill and paged decode attention."""

from __future__ import annotations

import types
from functools import partial

import pytest
import torch

from engine import kernels
from engine.flags import REFERENCE

# the table with every kernel off: its entry checks, then the pure-torch reference
paged_decode_attention = partial(kernels.paged_decode_attention, REFERENCE)
prefill_attention = partial(kernels.prefill_attention, REFERENCE)


def reference_attention(q, k, v, q_pos, window):
    """float64 dense attention of queries at positions q_pos over keys 0..len(k)-1, python-looped masks."""
    hq, hkv = q.shape[1], k.shape[1]
    out = torch.empty(q.shape, dtype=torch.float64)
    scale = q.shape[-1] ** -0.5
    for h in range(hq):
        kh, vh = k[:, h // (hq // hkv)].double(), v[:, h // (hq // hkv)].double()
        for i, p in enumerate(q_pos):
            keep = [j for j in range(k.shape[0]) if j <= p and (window is None or j > p - window)]
            s = (kh[keep] @ q[i, h].double()) * scale
            w = torch.softmax(s, dim=0)
            out[i, h] = w @ vh[keep]
    return out


def make_paged(k_seqs, v_seqs, block_size, num_blocks, gen):
    """Scatter each sequence's K/V over shuffled blocks; returns caches, block tables, lengths."""
    hkv, d = k_seqs[0].shape[1:]
    k_cache = torch.randn(num_blocks, block_size, hkv, d, generator=gen).to(k_seqs[0].dtype)
    v_cache = torch.randn(num_blocks, block_size, hkv, d, generator=gen).to(k_seqs[0].dtype)
    free = torch.randperm(num_blocks, generator=gen).tolist()
    max_blocks = max((len(k) + block_size - 1) // block_size for k in k_seqs)
    tables = torch.full((len(k_seqs), max_blocks), -7, dtype=torch.int32)  # junk past the used blocks
    for b, (ks, vs) in enumerate(zip(k_seqs, v_seqs)):
        for p in range(ks.shape[0]):
            if p % block_size == 0:
                tables[b, p // block_size] = free.pop()
            blk = int(tables[b, p // block_size])
            k_cache[blk, p % block_size] = ks[p]
            v_cache[blk, p % block_size] = vs[p]
    tables[tables < 0] = 0
    lens = torch.tensor([k.shape[0] for k in k_seqs], dtype=torch.int32)
    return k_cache, v_cache, tables, lens


@pytest.mark.parametrize("hq,hkv", [(4, 4), (6, 2), (7, 1)])
@pytest.mark.parametrize("window", [None, 5])
def test_prefill_matches_dense_float64(hq, hkv, window, dtype, gen, close):
    lens, d = [7, 1, 19], 38
    n = sum(lens)
    q = torch.randn(n, hq, d, generator=gen).to(dtype)
    k = torch.randn(n, hkv, d, generator=gen).to(dtype)
    v = torch.randn(n, hkv, d, generator=gen).to(dtype)
    out = prefill_attention(q, k, v, lens, d**-0.5, window)
    assert out.shape == q.shape and out.dtype == dtype
    start = 0
    for length in lens:
        sl = slice(start, start + length)
        close(out[sl], reference_attention(q[sl], k[sl], v[sl], range(length), window), dtype, "reduction")
        start += length


def test_prefill_equals_hugging_face_eager_bitwise(dtype, gen):
    qwen3 = pytest.importorskip("transformers.models.qwen3.modeling_qwen3")
    n, hq, hkv, d, window = 19, 6, 2, 64, 7
    q = torch.randn(n, hq, d, generator=gen).to(dtype)
    k = torch.randn(n, hkv, d, generator=gen).to(dtype)
    v = torch.randn(n, hkv, d, generator=gen).to(dtype)
    for w in (None, window):
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        ok = (j <= i) & ((j > i - w) if w is not None else True)
        mask = torch.zeros(n, n, dtype=dtype).masked_fill(~ok, torch.finfo(dtype).min)
        module = types.SimpleNamespace(num_key_value_groups=hq // hkv, training=False)
        hf, _ = qwen3.eager_attention_forward(
            module, q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None], mask[None, None], d**-0.5
        )
        assert torch.equal(prefill_attention(q, k, v, [n], d**-0.5, w), hf[0])


@pytest.mark.parametrize("window", [None, 1, 9])
def test_paged_decode_matches_dense_float64(window, dtype, gen, close):
    hq, hkv, d, block_size = 6, 2, 38, 4
    ctx = [1, 7, 19, 8]
    k_seqs = [torch.randn(c, hkv, d, generator=gen).to(dtype) for c in ctx]
    v_seqs = [torch.randn(c, hkv, d, generator=gen).to(dtype) for c in ctx]
    k_cache, v_cache, tables, lens = make_paged(k_seqs, v_seqs, block_size, 19, gen)
    q = torch.randn(len(ctx), hq, d, generator=gen).to(dtype)
    out = paged_decode_attention(q, k_cache, v_cache, tables, lens, d**-0.5, window)
    assert out.shape == q.shape and out.dtype == dtype
    for b, c in enumerate(ctx):
        expected = reference_attention(q[b : b + 1], k_seqs[b], v_seqs[b], [c - 1], window)
        close(out[b : b + 1], expected, dtype, "reduction")


def test_paged_decode_equals_the_last_prefill_row(dtype, gen, close):
    # same rounding points; only the CPU GEMM's accumulation order may differ between M=1 and M=33
    hq, hkv, d, block_size, c = 4, 2, 64, 8, 33
    k = torch.randn(c, hkv, d, generator=gen).to(dtype)
    v = torch.randn(c, hkv, d, generator=gen).to(dtype)
    q = torch.randn(c, hq, d, generator=gen).to(dtype)
    k_cache, v_cache, tables, lens = make_paged([k], [v], block_size, 7, gen)
    for window in (None, 13):
        full = prefill_attention(q, k, v, [c], d**-0.5, window)
        dec = paged_decode_attention(q[-1:], k_cache, v_cache, tables, lens, d**-0.5, window)
        close(dec[0], full[-1], dtype)


def test_attention_errors_name_the_tensor(gen):
    q = torch.randn(5, 4, 8, generator=gen)
    k = torch.randn(5, 3, 8, generator=gen)
    with pytest.raises(ValueError, match="q: 4 heads is not a multiple of the 3 KV heads"):
        prefill_attention(q, k, k, [5], 1.0)
    with pytest.raises(ValueError, match="seq_lens: sum 4 != q's tokens 5"):
        prefill_attention(q, q, q, [2, 2], 1.0)
    with pytest.raises(ValueError, match="sliding_window: expected None or >= 1, got 0"):
        prefill_attention(q, q, q, [5], 1.0, 0)
    cache = torch.randn(3, 4, 2, 8, generator=gen)
    qd = torch.randn(2, 4, 8, generator=gen)
    tables = torch.zeros(2, 2, dtype=torch.int32)
    with pytest.raises(ValueError, match="block_tables: 2 blocks per row, context needs 3"):
        paged_decode_attention(qd, cache, cache, tables, torch.tensor([9, 1], dtype=torch.int32), 1.0)
    with pytest.raises(ValueError, match="context_lens: every sequence needs"):
        paged_decode_attention(qd, cache, cache, tables, torch.tensor([0, 1], dtype=torch.int32), 1.0)
    with pytest.raises(TypeError, match="k_cache: dtype bfloat16 differs from q's float32"):
        lens = torch.tensor([2, 1], dtype=torch.int32)
        paged_decode_attention(qd, cache.bfloat16(), cache.bfloat16(), tables, lens, 1.0)


def test_prefill_accepts_views_of_fused_qkv(dtype, gen, close):
    hq, hkv, d, lens = 4, 2, 19, [7, 11]
    qkv = torch.randn(sum(lens), hq + 2 * hkv, d, generator=gen).to(dtype)
    q, k, v = qkv[:, :hq], qkv[:, hq : hq + hkv], qkv[:, hq + hkv :]
    out = prefill_attention(q, k, v, lens, d**-0.5)
    close(out, prefill_attention(q.contiguous(), k.contiguous(), v.contiguous(), lens, d**-0.5), dtype)
    close(out[7:], reference_attention(q[7:], k[7:], v[7:], range(11), None), dtype, "reduction")


def test_paged_decode_equals_hugging_face_eager_decode_bitwise(dtype, gen):
    qwen3 = pytest.importorskip("transformers.models.qwen3.modeling_qwen3")
    hq, hkv, d, block_size, c = 6, 2, 64, 16, 37
    k = torch.randn(c, hkv, d, generator=gen).to(dtype)
    v = torch.randn(c, hkv, d, generator=gen).to(dtype)
    q = torch.randn(1, hq, d, generator=gen).to(dtype)
    k_cache, v_cache, tables, lens = make_paged([k], [v], block_size, 5, gen)
    module = types.SimpleNamespace(num_key_value_groups=hq // hkv, training=False)
    for window in (None, 11):
        ok = torch.ones(c, dtype=torch.bool) if window is None else torch.arange(c) > c - 1 - window
        mask = torch.zeros(1, c, dtype=dtype).masked_fill(~ok[None], torch.finfo(dtype).min)
        hf, _ = qwen3.eager_attention_forward(
            module, q[:, :, None], k.transpose(0, 1)[None], v.transpose(0, 1)[None], mask[None, None], d**-0.5
        )
        ours = paged_decode_attention(q, k_cache, v_cache, tables, lens, d**-0.5, window)
        assert torch.equal(ours, hf[:, 0])


@pytest.mark.parametrize(("hq", "hkv", "d"), [(4, 2, 32), (8, 8, 64), (16, 2, 128), (8, 1, 256)])
@pytest.mark.parametrize("window", [None, 13])
def test_fp32_batched_decode_is_bitwise_transformers_one_sequence_at_a_time(hq, hkv, d, window, gen):
    """Each row of a batch (random lengths, some shared, eight of one length: one indexed pass, some short)
    equals transformers' eager decode of that sequence alone, and the engine's own call for it alone: batching
    moves no fp32 bit."""
    qwen3 = pytest.importorskip("transformers.models.qwen3.modeling_qwen3")
    module = types.SimpleNamespace(num_key_value_groups=hq // hkv, training=False)
    ctx = [int(c) for c in torch.randint(1, 90, (21,), generator=gen)] + [5, 5, 40, 40, 40, 1, 16, 17] + [23] * 8
    k_seqs = [torch.randn(c, hkv, d, generator=gen) for c in ctx]
    v_seqs = [torch.randn(c, hkv, d, generator=gen) for c in ctx]
    k_cache, v_cache, tables, lens = make_paged(k_seqs, v_seqs, 16, sum(-(-c // 16) for c in ctx) + 3, gen)
    q = torch.randn(len(ctx), hq, d, generator=gen)
    out = paged_decode_attention(q, k_cache, v_cache, tables, lens, d**-0.5, window)
    for b in torch.randperm(len(ctx), generator=gen).tolist():
        c, k, v = ctx[b], k_seqs[b], v_seqs[b]
        ok = torch.ones(c, dtype=torch.bool) if window is None else torch.arange(c) > c - 1 - window
        mask = torch.zeros(1, c).masked_fill(~ok[None], torch.finfo(torch.float32).min)
        hf, _ = qwen3.eager_attention_forward(
            module, q[b : b + 1, :, None], k.transpose(0, 1)[None], v.transpose(0, 1)[None], mask[None, None], d**-0.5
        )
        assert torch.equal(out[b : b + 1], hf[:, 0]), (b, c)
        alone = paged_decode_attention(
            q[b : b + 1], k_cache, v_cache, tables[b : b + 1], lens[b : b + 1], d**-0.5, window
        )
        assert torch.equal(out[b : b + 1], alone), (b, c)


def test_fp32_decode_plan_follows_the_tables_not_only_the_lengths(gen, close):
    """A step's layers share one gather plan; a call with equal lengths but other tables (here the same tensor,
    two rows swapped in place) gets a new one: each sequence reads its own keys, never the last call's."""
    hq, hkv, d = 4, 2, 32
    ctx = [20, 20, 7]
    k_seqs = [torch.randn(c, hkv, d, generator=gen) for c in ctx]
    v_seqs = [torch.randn(c, hkv, d, generator=gen) for c in ctx]
    k_cache, v_cache, tables, lens = make_paged(k_seqs, v_seqs, 16, 9, gen)
    q = torch.randn(len(ctx), hq, d, generator=gen)
    for order in ([0, 1, 2], [1, 0, 2]):
        if order[0] == 1:  # rows 0 and 1 trade tables: row 0 now reads sequence 1's keys
            tables[[0, 1]] = tables[[1, 0]].clone()
        out = paged_decode_attention(q, k_cache, v_cache, tables, lens, d**-0.5)
        for b, s in enumerate(order):
            expected = reference_attention(q[b : b + 1], k_seqs[s], v_seqs[s], [ctx[s] - 1], None)
            close(out[b : b + 1], expected, torch.float32, "reduction")


def test_paged_decode_at_block_boundaries(dtype, gen, close):
    hq, hkv, d, block_size = 2, 1, 16, 32
    ctx = [1, 31, 32, 33, 64, 100]
    k_seqs = [torch.randn(c, hkv, d, generator=gen).to(dtype) for c in ctx]
    v_seqs = [torch.randn(c, hkv, d, generator=gen).to(dtype) for c in ctx]
    k_cache, v_cache, tables, lens = make_paged(k_seqs, v_seqs, block_size, 19, gen)
    q = torch.randn(len(ctx), hq, d, generator=gen).to(dtype)
    out = paged_decode_attention(q, k_cache, v_cache, tables, lens, d**-0.5)
    for b, c in enumerate(ctx):
        expected = reference_attention(q[b : b + 1], k_seqs[b], v_seqs[b], [c - 1], None)
        close(out[b : b + 1], expected, dtype, "reduction")


def test_bf16_rounds_scores_and_probabilities(gen):
    # the eager rounding points are real: an fp32 pipeline rounded once at the end differs somewhere
    n, h, d = 33, 2, 64
    q, k, v = (torch.randn(n, h, d, generator=gen).bfloat16() for _ in range(3))
    ours = prefill_attention(q, k, v, [n], d**-0.5)
    once = prefill_attention(q.float(), k.float(), v.float(), [n], d**-0.5).bfloat16()
    assert not torch.equal(ours, once)


def test_a_long_rows_softmax_is_its_padded_rows_and_a_short_ones_is_not(gen):
    """The fp32 decode plan runs one softmax over the rows of PAD_SOFTMAX_MIN keys or more, padded with -inf to the
    longest: each must give the values of its own row's softmax. Below a full vector of keys torch takes another
    path, which is why short rows keep their own call (on this CPU some short length differs, shown here)."""
    from engine.ops.paged_attn import PAD_SOFTMAX_MIN

    width = 300
    for n in range(PAD_SOFTMAX_MIN, width + 1):
        x = torch.randn(4, n, generator=gen) * 6
        padded = torch.full((4, width), float("-inf"))
        padded[:, :n] = x
        assert torch.equal(torch.softmax(padded, -1)[:, :n], torch.softmax(x, -1)), n
    differs = []
    for n in range(2, 16):
        x = torch.randn(64, n, generator=gen) * 6
        padded = torch.cat((x, torch.full((64, 64 - n), float("-inf"))), dim=1)
        differs += [n] * (not torch.equal(torch.softmax(padded, -1)[:, :n], torch.softmax(x, -1)))
    # the vector kernels (AVX2, AVX-512) take another path below a full vector; torch's scalar build
    # (ATEN_CPU_CAPABILITY=default) has no such path, and there every length agrees
    if torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"):
        assert differs, "no short length differs: the padded softmax's threshold could be lowered on this CPU"


@pytest.mark.parametrize("d", [32, 64, 128, 256])
def test_one_padded_pv_product_gives_every_rows_own_bits(d, gen):
    """The fp32 decode plan multiplies the long rows' probabilities by their values in one batched product, each
    row padded to the longest with probability 0 (its padded keys read a finite value row): each row must equal
    its own [Hq, 1, n] @ [Hq, n, D] product bitwise, short rows, long rows and contexts past 1000 keys alike."""
    hq = 4
    for width in (48, 300, 1100):
        ns = [int(n) for n in torch.randint(1, width + 1, (10,), generator=gen)] + [width, 1]
        probs = [torch.softmax(torch.randn(hq, 1, n, generator=gen) * 4, -1) for n in ns]
        values = [torch.randn(hq, n, d, generator=gen) for n in ns]
        p = torch.zeros(len(ns), hq, 1, width)
        v = torch.randn(len(ns), hq, width, d, generator=gen)  # padded keys: finite values, probability 0
        for i, n in enumerate(ns):
            p[i, :, :, :n], v[i, :, :n] = probs[i], values[i]
        out = torch.bmm(p.view(-1, 1, width), v.view(-1, width, d)).view(len(ns), hq, 1, d)
        for i, n in enumerate(ns):
            assert torch.equal(out[i], torch.bmm(probs[i], values[i])), (width, n)
