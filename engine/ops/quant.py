"""Quantised-weight dequant and dequant-then-linear: AWQ int4, GPTQ int2/4/8 and NVFP4 (rows QUANT-AWQ,
QUANT-GPTQ, QUANT-NVFP4).

AWQ (AutoAWQ GEMM layout): qweight [K, N/8] int32 packs eight 4-bit weights of one input row along N;
qzeros [K/group, N/8] int32 packs the zero points the same way; scales [K/group, N]. Within a word,
column 8w + j sits in nibble AWQ_COLUMN_NIBBLE[j] (nibble i = bits 4i..4i+3): reading the nibbles in the
order 0,4,1,5,2,6,3,7 yields columns 8w..8w+7 (the packer wrote columns in the order 0,2,4,6,1,3,5,7).
W[k, n] = (q[k, n] - z[k // group, n]) * s[k // group, n].

GPTQ (AutoGPTQ / GPTQModel): qweight [K * bits/32, N] int32 packs 32/bits weights of one output column
along K, row k in field k % (32/bits) of word k // (32/bits), fields in order from the least significant
bits; qzeros [groups, N * bits/32] int32 packs zero points along N in the same sequential order; scales
[groups, N]; g_idx [K] gives the group of each input row (act order shuffles it).
W[k, n] = (q[k, n] - z[g_idx[k], n]) * s[g_idx[k], n]. Out-of-range g_idx values raise IndexError in the
reference (a host-side check, skipped during CUDA-graph capture); the CUDA kernels cannot sync to check,
and give NaN for those rows instead. Zero offset: version 1 checkpoints store zero - 1, so z = stored + 1
(not wrapped to the field width, as the exllama-style kernels read it); version 2 stores the zero itself.

NVFP4 (NVIDIA ModelOpt): packed [N, K/2] uint8 holds two e2m1 codes per byte, element 2i in the LOW
nibble and 2i+1 in the high nibble; an e2m1 code is a sign bit (bit 3) and a magnitude code (bits 0-2)
for 0, 0.5, 1, 1.5, 2, 3, 4, 6. block_scales [N, K/16] float8_e4m3fn: one scale per 16 consecutive values
of a row; global_scale: one fp32 value that multiplies (ModelOpt's `weight_scale_2`).
W[n, k] = e2m1(packed) * fp32(block_scales[n, k // 16]) * global_scale.

Rounding: AWQ and GPTQ's q - z is an exact small integer, times the scale in fp32 (exact), rounded once
to the output dtype. NVFP4's e2m1 value times the e4m3 scale is exact in fp32; the product with the
global scale is one fp32 rounding; the result is rounded once more to the output dtype. The `*_linear`
references dequantise straight to x.dtype (one rounding), then `linear`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import torch

from engine.ops._check import FLOAT_DTYPES, INDEX_DTYPES, check_dim, check_tensor
from engine.ops._compose import composite
from engine.ops._packing import repeat_each, unpack_int32

AWQ_COLUMN_NIBBLE = (0, 4, 1, 5, 2, 6, 3, 7)  # column j of a word -> the nibble that holds it
ZERO_OFFSET = {1: 1, 2: 0}  # GPTQ checkpoint format version -> added to the stored zero
E2M1_MAGNITUDE = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
NVFP4_BLOCK = 16  # values per e4m3 block scale


# --- AWQ --------------------------------------------------------------------------------------------------
def dequant_awq(
    qweight: torch.Tensor,  # qweight: [K, N/8] int32
    qzeros: torch.Tensor,  # qzeros: [K/group, N/8] int32
    scales: torch.Tensor,  # scales: [K/group, N] fp16/bf16/fp32
    group_size: int,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:  # [K, N], dtype (default scales.dtype)
    """The dense [K, N] weight of an AWQ int4 checkpoint (x @ W is the layer)."""
    n = qweight.shape[1] * 8
    order = _column_order(n, qweight.device)
    q = unpack_int32(qweight, 4)[:, order]  # [K, N]
    z = repeat_each(unpack_int32(qzeros, 4)[:, order], group_size, 0)
    s = repeat_each(scales.float(), group_size, 0)
    return ((q - z).float() * s).to(dtype or scales.dtype)


def check_dequant_awq(
    qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, group_size: int, dtype: torch.dtype | None = None
) -> None:
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


@composite
def awq_linear(
    parts: Any,  # the ops it runs, by name: the references (_compose.REFERENCES) or the kernel table's
    x: torch.Tensor,  # x: [..., K]
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    group_size: int,
    bias: torch.Tensor | None = None,  # bias: [N], x.dtype
) -> torch.Tensor:  # [..., N], x.dtype
    """Dequant straight to x.dtype (one rounding), then `linear`: the reference for a fused AWQ GEMV."""
    w = parts.dequant_awq(qweight, qzeros, scales, group_size, x.dtype)
    return parts.linear(x, w.T, bias)


def check_awq_linear(
    x: torch.Tensor,
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    group_size: int,
    bias: torch.Tensor | None = None,
) -> None:
    check_dequant_awq(qweight, qzeros, scales, group_size)
    _check_x(x, qweight.shape[0])


@lru_cache(maxsize=64)
def _column_order(n: int, device: torch.device) -> torch.Tensor:
    """Index into the unpacked nibbles (word-major) that yields columns 0..N-1; built once per (N, device),
    so later calls copy nothing to the device (CUDA-graph capture allows no host-to-device copy)."""
    nib = torch.tensor(AWQ_COLUMN_NIBBLE, device=device)
    return (torch.arange(n // 8, device=device)[:, None] * 8 + nib).reshape(-1)


# --- GPTQ -------------------------------------------------------------------------------------------------
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
    k, groups = g_idx.shape[0], scales.shape[0]
    if k and not _capturing(g_idx) and (int(g_idx.min()) < 0 or int(g_idx.max()) >= groups):
        raise IndexError(f"g_idx: values outside [0, {groups})")
    q = unpack_int32(qweight.T, bits).T  # [K, N]: unpack along K
    z = unpack_int32(qzeros, bits) + ZERO_OFFSET[version]  # [groups, N]
    rows = g_idx.long()
    return ((q - z[rows]).float() * scales.float()[rows]).to(dtype or scales.dtype)


def check_dequant_gptq(
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    g_idx: torch.Tensor,
    bits: int = 4,
    version: int = 1,
    dtype: torch.dtype | None = None,
) -> None:
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


@composite
def gptq_linear(
    parts: Any,  # the ops it runs, by name: the references (_compose.REFERENCES) or the kernel table's
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
    w = parts.dequant_gptq(qweight, qzeros, scales, g_idx, bits, version, x.dtype)
    return parts.linear(x, w.T, bias)


def check_gptq_linear(
    x: torch.Tensor,
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    g_idx: torch.Tensor,
    bits: int = 4,
    version: int = 1,
    bias: torch.Tensor | None = None,
) -> None:
    check_dequant_gptq(qweight, qzeros, scales, g_idx, bits, version)
    _check_x(x, g_idx.shape[0])


def _capturing(t: torch.Tensor) -> bool:
    """Whether t's device is capturing a CUDA graph (where the reference's host-side g_idx check would sync)."""
    return t.is_cuda and torch.cuda.is_current_stream_capturing()


# --- NVFP4 ------------------------------------------------------------------------------------------------
def dequant_nvfp4(
    packed: torch.Tensor,  # packed: [N, K/2] uint8
    block_scales: torch.Tensor,  # block_scales: [N, K/16] float8_e4m3fn
    global_scale: torch.Tensor | float,  # [] or [1] fp32, or a float
    dtype: torch.dtype,
) -> torch.Tensor:  # [N, K], dtype (a row-major nn.Linear weight)
    """The dense [N, K] weight of an NVFP4 checkpoint."""
    gs = nvfp4_global_scale(global_scale, packed.device)
    n, k = packed.shape[0], packed.shape[1] * 2
    codes = torch.stack((packed & 0xF, packed >> 4), dim=-1).reshape(n, k).long()  # low nibble first
    magnitude = _magnitudes(packed.device)[codes & 7]
    values = torch.where((codes & 8) != 0, -magnitude, magnitude)
    scaled = values * repeat_each(block_scales.float(), NVFP4_BLOCK, 1)  # exact
    return (scaled * gs).to(dtype)


def check_dequant_nvfp4(
    packed: torch.Tensor, block_scales: torch.Tensor, global_scale: torch.Tensor | float, dtype: torch.dtype
) -> None:
    check_tensor(packed, "packed", ndim=2, dtypes=(torch.uint8,))
    check_tensor(block_scales, "block_scales", ndim=2, dtypes=(torch.float8_e4m3fn,))
    if isinstance(global_scale, torch.Tensor):
        check_tensor(global_scale, "global_scale", dtypes=(torch.float32,))
        if global_scale.numel() != 1:
            raise ValueError(f"global_scale: expected one value, got shape {tuple(global_scale.shape)}")
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"dtype: {dtype} is not a float output dtype")
    n, k = packed.shape[0], packed.shape[1] * 2
    if k % NVFP4_BLOCK:
        raise ValueError(f"packed: K={k} is not a multiple of {NVFP4_BLOCK}")
    check_dim(block_scales, "block_scales", 0, n, "packed's N")
    check_dim(block_scales, "block_scales", 1, k // NVFP4_BLOCK, f"K/{NVFP4_BLOCK}")


@composite
def nvfp4_linear(
    parts: Any,  # the ops it runs, by name: the references (_compose.REFERENCES) or the kernel table's
    x: torch.Tensor,  # x: [..., K]
    packed: torch.Tensor,
    block_scales: torch.Tensor,
    global_scale: torch.Tensor | float,
    bias: torch.Tensor | None = None,  # bias: [N], x.dtype
) -> torch.Tensor:  # [..., N], x.dtype
    """Dequant to x.dtype, then `linear`: the reference for a fused NVFP4 GEMV."""
    return parts.linear(x, parts.dequant_nvfp4(packed, block_scales, global_scale, x.dtype), bias)


def check_nvfp4_linear(
    x: torch.Tensor,
    packed: torch.Tensor,
    block_scales: torch.Tensor,
    global_scale: torch.Tensor | float,
    bias: torch.Tensor | None = None,
) -> None:
    check_tensor(x, "x", dtypes=FLOAT_DTYPES)
    check_dequant_nvfp4(packed, block_scales, global_scale, x.dtype)
    _check_x(x, packed.shape[1] * 2)


def nvfp4_global_scale(global_scale: torch.Tensor | float, device: torch.device) -> torch.Tensor | float:
    """A tensor on `device` as a 0-d tensor; a float or a host tensor as the float of its fp32 value (a
    Python scalar multiplies in fp32 exactly like the fp32 tensor would, and needs no device copy)."""
    if isinstance(global_scale, torch.Tensor):
        if global_scale.device == device or global_scale.device.type != "cpu":
            return global_scale.reshape(()).to(device)
        return float(global_scale.reshape(()))
    return float(torch.tensor(float(global_scale), dtype=torch.float32))  # rounded to fp32 on the host


@lru_cache(maxsize=16)
def _magnitudes(device: torch.device) -> torch.Tensor:
    """The e2m1 magnitude table on `device`, built once (later calls copy nothing to the device)."""
    return torch.tensor(E2M1_MAGNITUDE, dtype=torch.float32, device=device)


def _check_x(x: torch.Tensor, k: int) -> None:
    check_tensor(x, "x", dtypes=FLOAT_DTYPES)
    if x.dim() < 1:
        raise ValueError("x: expected at least 1 dim, got a scalar")
    check_dim(x, "x", x.dim() - 1, k, "the weight's K (in_features)")
