"""AWQ int4 dequant and dequant-then-linear (row QUANT-AWQ).

Format (AutoAWQ GEMM layout): qweight [K, N/8] int32 packs eight 4-bit weights
of one input row along N; qzeros [K/group, N/8] int32 packs the zero points the
same way; scales [K/group, N]. Within a word, column 8w + j sits in nibble
AWQ_COLUMN_NIBBLE[j] (nibble i = bits 4i..4i+3): reading the nibbles in the
order 0,4,1,5,2,6,3,7 yields columns 8w..8w+7 (the packer wrote columns in the
order 0,2,4,6,1,3,5,7). W[k, n] = (q[k, n] - z[k // group, n]) * s[k // group, n].

Rounding: q - z is an exact small integer, times the scale in fp32 (exact: a
5-bit integer times an 11-bit significand), rounded once to the output dtype.
"""
from __future__ import annotations

from functools import lru_cache

import torch

from engine import flags
from engine.cuda import quant as cuda_quant
from engine.ops._check import FLOAT_DTYPES, check_dim, check_tensor
from engine.ops._packing import repeat_each, unpack_int32
from engine.ops.linear import linear

AWQ_COLUMN_NIBBLE = (0, 4, 1, 5, 2, 6, 3, 7)  # column j of a word -> the nibble that holds it


def dequant_awq(
    qweight: torch.Tensor,  # qweight: [K, N/8] int32
    qzeros: torch.Tensor,  # qzeros: [K/group, N/8] int32
    scales: torch.Tensor,  # scales: [K/group, N] fp16/bf16/fp32
    group_size: int,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:  # [K, N], dtype (default scales.dtype)
    """The dense [K, N] weight of an AWQ int4 checkpoint (x @ W is the layer)."""
    check_tensor(qweight, "qweight", ndim=2, dtypes=(torch.int32,))
    check_tensor(qzeros, "qzeros", ndim=2, dtypes=(torch.int32,))
    check_tensor(scales, "scales", ndim=2, dtypes=FLOAT_DTYPES)
    k, n = qweight.shape[0], qweight.shape[1] * 8
    if group_size < 1 or k % group_size:
        raise ValueError(f"group_size: {group_size} does not divide K={k}")
    check_dim(scales, "scales", 0, k // group_size, "K/group_size")
    check_dim(scales, "scales", 1, n, "N (8 per qweight word)")
    check_dim(qzeros, "qzeros", 0, k // group_size, "K/group_size")
    check_dim(qzeros, "qzeros", 1, n // 8, "N/8")
    if qweight.is_cuda and flags.enabled("VT_DEQUANT_KERNEL") and flags.enabled("VT_KERNELS"):
        return cuda_quant.dequant_awq(qweight, qzeros, scales, group_size, dtype)
    order = _column_order(n, qweight.device)
    q = unpack_int32(qweight, 4)[:, order]  # [K, N]
    z = repeat_each(unpack_int32(qzeros, 4)[:, order], group_size, 0)
    s = repeat_each(scales.float(), group_size, 0)
    return ((q - z).float() * s).to(dtype or scales.dtype)


def awq_linear(
    x: torch.Tensor,  # x: [..., K]
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    group_size: int,
    bias: torch.Tensor | None = None,  # bias: [N], x.dtype
) -> torch.Tensor:  # [..., N], x.dtype
    """Dequant straight to x.dtype (one rounding), then `linear`: the reference for a fused AWQ GEMV."""
    one_row = x.dim() >= 1 and x.numel() == x.shape[-1]  # M = 1: the fused dequant-GEMV
    if x.is_cuda and one_row and flags.enabled("VT_DEQUANT_GEMV") and flags.enabled("VT_KERNELS"):
        return cuda_quant.awq_linear(x, qweight, qzeros, scales, group_size, bias)
    w = dequant_awq(qweight, qzeros, scales, group_size, dtype=x.dtype)
    return linear(x, w.T, bias)


@lru_cache(maxsize=64)
def _column_order(n: int, device: torch.device) -> torch.Tensor:
    """Index into the unpacked nibbles (word-major) that yields columns 0..N-1; built once per (N, device),
    so later calls copy nothing to the device (CUDA-graph capture allows no host-to-device copy)."""
    nib = torch.tensor(AWQ_COLUMN_NIBBLE, device=device)
    return (torch.arange(n // 8, device=device)[:, None] * 8 + nib).reshape(-1)
