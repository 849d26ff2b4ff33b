"""GPTQ int2/4/8 dequant with act-order g_idx, and dequant-then-linear (row QUANT-GPTQ).

Format (AutoGPTQ / GPTQModel): qweight [K * bits/32, N] int32 packs 32/bits
weights of one output column along K, row k in field k % (32/bits) of word
k // (32/bits), fields in order from the least significant bits; qzeros
[groups, N * bits/32] int32 packs zero points along N in the same sequential
order; scales [groups, N]; g_idx [K] gives the group of each input row (act
order shuffles it). W[k, n] = (q[k, n] - z[g_idx[k], n]) * s[g_idx[k], n].

Out-of-range g_idx values raise IndexError in the reference (a host-side
check, skipped during CUDA-graph capture); the CUDA kernels cannot sync to
check, and give NaN for those rows instead.

Zero offset: version 1 checkpoints store zero - 1, so z = stored + 1 (not
wrapped to the field width, as the exllama-style kernels read it); version 2
stores the zero itself, z = stored.

Rounding: q - z is an exact integer, times the scale in fp32 (exact), rounded
once to the output dtype.
"""
from __future__ import annotations

import torch

from engine import flags
from engine.cuda import quant as cuda_quant
from engine.ops._check import FLOAT_DTYPES, INDEX_DTYPES, check_dim, check_tensor
from engine.ops._packing import unpack_int32
from engine.ops.linear import linear

ZERO_OFFSET = {1: 1, 2: 0}  # checkpoint format version -> added to the stored zero


def dequant_gptq(
    qweight: torch.Tensor,  # qweight: [K*bits/32, N] int32
    qzeros: torch.Tensor,  # qzeros: [groups, N*bits/32] int32
    scales: torch.Tensor,  # scales: [groups, N] fp16/bf16/fp32
    g_idx: torch.Tensor,  # g_idx: [K] int, group of each input row
    bits: int = 4,
    version: int = 1,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:  # [K, N], dtype (default scales.dtype)
    """The dense [K, N] weight of a GPTQ checkpoint (x @ W is the layer)."""
    if bits not in (2, 4, 8):
        raise ValueError(f"bits: {bits} not supported (2, 4 or 8)")
    if version not in ZERO_OFFSET:
        raise ValueError(f"version: {version} is not a GPTQ format version (1 or 2)")
    check_tensor(qweight, "qweight", ndim=2, dtypes=(torch.int32,))
    check_tensor(qzeros, "qzeros", ndim=2, dtypes=(torch.int32,))
    check_tensor(scales, "scales", ndim=2, dtypes=FLOAT_DTYPES)
    check_tensor(g_idx, "g_idx", ndim=1, dtypes=INDEX_DTYPES)
    per_word = 32 // bits
    k, n = qweight.shape[0] * per_word, qweight.shape[1]
    groups = scales.shape[0]
    check_dim(g_idx, "g_idx", 0, k, f"K (qweight rows * {per_word})")
    check_dim(scales, "scales", 1, n, "N")
    check_dim(qzeros, "qzeros", 0, groups, "scales' groups")
    check_dim(qzeros, "qzeros", 1, n // per_word, f"N/{per_word}")
    if n % per_word:
        raise ValueError(f"scales: N={n} is not a multiple of {per_word} (qzeros packing)")
    if qweight.is_cuda and bits == 4 and flags.enabled("VT_DEQUANT_KERNEL") and flags.enabled("VT_KERNELS"):
        # no host-side range check here (it would sync): the kernel turns out-of-range rows into NaN
        return cuda_quant.dequant_gptq(qweight, qzeros, scales, g_idx, bits, version, dtype)
    if k and not _capturing(g_idx) and (int(g_idx.min()) < 0 or int(g_idx.max()) >= groups):
        raise IndexError(f"g_idx: values outside [0, {groups})")
    q = unpack_int32(qweight.T, bits).T  # [K, N]: unpack along K
    z = unpack_int32(qzeros, bits) + ZERO_OFFSET[version]  # [groups, N]
    rows = g_idx.long()
    return ((q - z[rows]).float() * scales.float()[rows]).to(dtype or scales.dtype)


def gptq_linear(
    x: torch.Tensor,  # x: [..., K]
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    g_idx: torch.Tensor,
    bits: int = 4,
    version: int = 1,
    bias: torch.Tensor | None = None,  # bias: [N], x.dtype
) -> torch.Tensor:  # [..., N], x.dtype
    """Dequant straight to x.dtype (one rounding), then `linear`: the reference for a fused GPTQ GEMV."""
    one_row = x.dim() >= 1 and x.numel() == x.shape[-1]  # M = 1: the fused dequant-GEMV
    if x.is_cuda and one_row and bits == 4 and flags.enabled("VT_DEQUANT_GEMV") and flags.enabled("VT_KERNELS"):
        return cuda_quant.gptq_linear(x, qweight, qzeros, scales, g_idx, bits, version, bias)
    w = dequant_gptq(qweight, qzeros, scales, g_idx, bits, version, dtype=x.dtype)
    return linear(x, w.T, bias)


def _capturing(t: torch.Tensor) -> bool:
    """Whether t's device is capturing a CUDA graph (where the reference's host-side g_idx check would sync)."""
    return t.is_cuda and torch.cuda.is_current_stream_capturing()
