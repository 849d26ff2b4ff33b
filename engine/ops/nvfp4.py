"""NVFP4 dequant and dequant-then-linear (row QUANT-NVFP4).

Format (NVIDIA ModelOpt NVFP4): packed [N, K/2] uint8 holds two e2m1 codes per
byte, element 2i in the LOW nibble and 2i+1 in the high nibble; an e2m1 code is
a sign bit (bit 3) and a magnitude code (bits 0-2) for 0, 0.5, 1, 1.5, 2, 3, 4, 6.
block_scales [N, K/16] float8_e4m3fn: one scale per 16 consecutive values of a
row; global_scale: one fp32 value that multiplies (ModelOpt's `weight_scale_2`).
W[n, k] = e2m1(packed) * fp32(block_scales[n, k // 16]) * global_scale.

Rounding: the e2m1 value times the e4m3 scale is exact in fp32 (2 and 4
significant bits); the product with the global scale is one fp32 rounding; the
result is rounded once more to the output dtype.
"""
from __future__ import annotations

from functools import lru_cache

import torch

from engine import flags
from engine.cuda import quant as cuda_quant
from engine.ops._check import FLOAT_DTYPES, check_dim, check_tensor
from engine.ops._packing import repeat_each
from engine.ops.linear import linear

E2M1_MAGNITUDE = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
NVFP4_BLOCK = 16  # values per e4m3 block scale


def dequant_nvfp4(
    packed: torch.Tensor,  # packed: [N, K/2] uint8
    block_scales: torch.Tensor,  # block_scales: [N, K/16] float8_e4m3fn
    global_scale: torch.Tensor | float,  # [] or [1] fp32, or a float
    dtype: torch.dtype,
) -> torch.Tensor:  # [N, K], dtype (a row-major nn.Linear weight)
    """The dense [N, K] weight of an NVFP4 checkpoint."""
    check_tensor(packed, "packed", ndim=2, dtypes=(torch.uint8,))
    check_tensor(block_scales, "block_scales", ndim=2, dtypes=(torch.float8_e4m3fn,))
    gs = _global_scale(global_scale, packed.device)
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"dtype: {dtype} is not a float output dtype")
    n, k = packed.shape[0], packed.shape[1] * 2
    if k % NVFP4_BLOCK:
        raise ValueError(f"packed: K={k} is not a multiple of {NVFP4_BLOCK}")
    check_dim(block_scales, "block_scales", 0, n, "packed's N")
    check_dim(block_scales, "block_scales", 1, k // NVFP4_BLOCK, f"K/{NVFP4_BLOCK}")
    if packed.is_cuda and flags.enabled("VT_DEQUANT_KERNEL") and flags.enabled("VT_KERNELS"):
        return cuda_quant.dequant_nvfp4(packed, block_scales, gs, dtype)
    codes = torch.stack((packed & 0xF, packed >> 4), dim=-1).reshape(n, k).long()  # low nibble first
    magnitude = _magnitudes(packed.device)[codes & 7]
    values = torch.where((codes & 8) != 0, -magnitude, magnitude)
    scaled = values * repeat_each(block_scales.float(), NVFP4_BLOCK, 1)  # exact
    return (scaled * gs).to(dtype)


def nvfp4_linear(
    x: torch.Tensor,  # x: [..., K]
    packed: torch.Tensor,
    block_scales: torch.Tensor,
    global_scale: torch.Tensor | float,
    bias: torch.Tensor | None = None,  # bias: [N], x.dtype
) -> torch.Tensor:  # [..., N], x.dtype
    """Dequant to x.dtype, then `linear`: the reference for a fused NVFP4 GEMV."""
    one_row = x.dim() >= 1 and x.numel() == x.shape[-1]  # M = 1: the fused dequant-GEMV
    if x.is_cuda and one_row and flags.enabled("VT_DEQUANT_GEMV") and flags.enabled("VT_KERNELS"):
        return cuda_quant.nvfp4_linear(x, packed, block_scales, global_scale, bias)
    return linear(x, dequant_nvfp4(packed, block_scales, global_scale, x.dtype), bias)


@lru_cache(maxsize=16)
def _magnitudes(device: torch.device) -> torch.Tensor:
    """The e2m1 magnitude table on `device`, built once (later calls copy nothing to the device)."""
    return torch.tensor(E2M1_MAGNITUDE, dtype=torch.float32, device=device)


def _global_scale(global_scale: torch.Tensor | float, device: torch.device) -> torch.Tensor | float:
    """A tensor on `device` as a 0-d tensor; a float or a host tensor as the float of its fp32 value (a
    Python scalar multiplies in fp32 exactly like the fp32 tensor would, and needs no device copy)."""
    if isinstance(global_scale, torch.Tensor):
        check_tensor(global_scale, "global_scale", dtypes=(torch.float32,))
        if global_scale.numel() != 1:
            raise ValueError(f"global_scale: expected one value, got shape {tuple(global_scale.shape)}")
        if global_scale.device == device or global_scale.device.type != "cpu":
            return global_scale.reshape(()).to(device)
        return float(global_scale.reshape(()))
    return float(torch.tensor(float(global_scale), dtype=torch.float32))  # rounded to fp32 on the host
