"""Split-KV paged decode attention: fp32 per-split partials and their log-sum-exp combine (row KERNEL-ATTN-SPLITKV).

Partitioning: sequence b's context of n = context_lens[b] positions spans
nb = ceil(n / block_size) blocks; split s owns blocks [s*per, (s+1)*per) with
per = ceil(nb / num_splits), i.e. positions [s*per*block_size, min((s+1)*per*block_size, n)).
Splits past the end, and splits whose positions all fall outside the sliding
window, are empty: lse = -inf and a zero output.

Rounding: q, K and V are read in their dtype and upcast to fp32; scores, the
softmax, the P@V accumulation, the partials, the lse and the combine are fp32;
the combined output is rounded once to the requested dtype. This is not the
eager rounding of `paged_decode_attention` (which rounds scores and
probabilities to the model dtype), so the split-KV arm is close to it, not
bitwise equal; it is a by-name arm of the kernel table (`splitkv_swap`),
outside the default order.
"""

from __future__ import annotations

import math

import torch

from engine.ops._check import FLOAT_DTYPES, check_dim, check_tensor
from engine.ops.paged_attn import check_paged, check_paged_shapes, gather_sequence


def splitkv_partial(
    q: torch.Tensor,  # q: [batch, Hq, D]
    k_cache: torch.Tensor,  # k_cache: [num_blocks, block_size, Hkv, D]
    v_cache: torch.Tensor,  # v_cache: [num_blocks, block_size, Hkv, D]
    block_tables: torch.Tensor,  # block_tables: [batch, max_blocks] int32
    context_lens: torch.Tensor,  # context_lens: [batch] int32, >= 1
    scale: float,
    num_splits: int,
    sliding_window: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:  # (out [batch, splits, Hq, D] fp32, lse [batch, splits, Hq] fp32)
    """Per split: the softmax-normalised output over the split's keys and the split's log-sum-exp."""
    check_tensor(q, "q", ndim=3, dtypes=FLOAT_DTYPES)
    check_paged_shapes(q, k_cache, v_cache, block_tables, context_lens)
    k_flat, v_flat = check_paged(q, k_cache, v_cache, block_tables, context_lens)
    if num_splits < 1:
        raise ValueError(f"num_splits: expected >= 1, got {num_splits}")
    if sliding_window is not None and sliding_window < 1:
        raise ValueError(f"sliding_window: expected None or >= 1, got {sliding_window}")
    batch, hq, d = q.shape
    block_size = k_cache.shape[1]
    group = hq // k_cache.shape[2]
    out = torch.zeros(batch, num_splits, hq, d, dtype=torch.float32, device=q.device)
    lse = torch.full((batch, num_splits, hq), float("-inf"), dtype=torch.float32, device=q.device)
    for b in range(batch):
        n = int(context_lens[b])
        k_seq, v_seq = gather_sequence(k_flat, v_flat, block_tables[b], n, block_size)
        first = 0 if sliding_window is None else max(0, n - sliding_window)  # oldest attended position
        per = math.ceil(math.ceil(n / block_size) / num_splits) * block_size
        qf = q[b].float()  # [Hq, D]
        for s in range(num_splits):
            lo, hi = max(s * per, first), min((s + 1) * per, n)
            if lo >= hi:
                continue
            kf = k_seq[lo:hi].float().repeat_interleave(group, dim=1)  # [len, Hq, D]
            vf = v_seq[lo:hi].float().repeat_interleave(group, dim=1)
            scores = torch.einsum("hd,lhd->hl", qf, kf) * scale  # [Hq, len]
            m = scores.max(dim=-1, keepdim=True).values
            p = torch.exp(scores - m)
            total = p.sum(dim=-1, keepdim=True)
            out[b, s] = torch.einsum("hl,lhd->hd", p, vf) / total
            lse[b, s] = (m + torch.log(total))[:, 0]
    return out, lse


def splitkv_combine(
    out_partial: torch.Tensor,  # out_partial: [batch, splits, Hq, D] fp32
    lse: torch.Tensor,  # lse: [batch, splits, Hq] fp32
    dtype: torch.dtype,
) -> torch.Tensor:  # [batch, Hq, D], dtype
    """`sum_s exp(lse_s - L) * out_s` with L = logsumexp_s(lse_s), in fp32, rounded once to dtype.

    Empty splits (lse = -inf) weigh exactly zero. Every (batch, head) needs at
    least one non-empty split.
    """
    check_tensor(out_partial, "out_partial", ndim=4, dtypes=(torch.float32,))
    check_tensor(lse, "lse", ndim=3, dtypes=(torch.float32,))
    for dim in range(3):
        check_dim(lse, "lse", dim, out_partial.shape[dim], f"out_partial's dim {dim}")
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"dtype: {dtype} is not a float model dtype")
    top = lse.max(dim=1, keepdim=True).values  # [batch, 1, Hq]
    if torch.isneginf(top).any():
        raise ValueError("lse: a (batch, head) has no non-empty split")
    weights = torch.exp(lse - top)  # [batch, splits, Hq]; exp(-inf) = 0 for empty splits
    total = weights.sum(dim=1)  # [batch, Hq]
    combined = (weights[..., None] * out_partial).sum(dim=1) / total[..., None]
    return combined.to(dtype)
