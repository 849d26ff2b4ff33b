"""Binding for the quantised-weight kernels (quant.cu): AWQ, GPTQ and NVFP4 dequant and M=1 dequant-GEMV."""
from __future__ import annotations

import ctypes
from functools import cache

import torch

from engine.cuda import build, ffi

_P = ctypes.c_void_p
_I = ctypes.c_int
PACK = 8  # int4 values per int32 word
NVFP4_GROUP = 16  # values per fp8 block scale


@cache
def _lib() -> ctypes.CDLL:
    lib = build.load("quant.cu")
    ffi.bind(lib, "vt_quant_awq_dequant", [_P] * 4 + [_I] * 5 + [_P])
    ffi.bind(lib, "vt_quant_gptq_dequant", [_P] * 5 + [_I] * 5 + [_P])
    ffi.bind(lib, "vt_quant_nvfp4_dequant", [_P] * 4 + [_I] * 3 + [_P])
    ffi.bind(lib, "vt_quant_awq_gemv", [_P] * 5 + [_I] * 6 + [_P])
    ffi.bind(lib, "vt_quant_gptq_gemv", [_P] * 6 + [_I] * 6 + [_P])
    ffi.bind(lib, "vt_quant_nvfp4_gemv", [_P] * 5 + [_I] * 4 + [_P])
    return lib


def _int4_shapes(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, along_n: bool) -> tuple[int, int]:
    """(K, N) of an int4 checkpoint, after checking every tensor's rank, dtype, device and contiguity."""
    dev = qweight.device
    ffi.require(qweight, "qweight", dim=2, dtype=torch.int32)
    ffi.require(qzeros, "qzeros", dim=2, dtype=torch.int32, device=dev)
    ffi.require(scales, "scales", dim=2, device=dev)
    if scales.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"scales: dtype {scales.dtype} is not bf16 or fp16")
    k, n = (qweight.shape[0], qweight.shape[1] * PACK) if along_n else (qweight.shape[0] * PACK, qweight.shape[1])
    if scales.shape[1] != n:
        raise ValueError(f"scales: shape {tuple(scales.shape)} is not [groups, N={n}]")
    if qzeros.shape != (scales.shape[0], n // PACK):
        raise ValueError(f"qzeros: shape {tuple(qzeros.shape)} != [groups={scales.shape[0]}, N/8={n // PACK}]")
    return k, n


def _awq_group(k: int, scales: torch.Tensor) -> int:
    groups = scales.shape[0]
    if groups < 1 or k % groups:
        raise ValueError(f"scales: {groups} groups do not divide K={k} into equal groups")
    return k // groups


def _vector(x: torch.Tensor, k: int, dev: torch.device) -> torch.Tensor:
    """x as a contiguous [K] vector; a GEMV takes M = 1 only."""
    if x.dim() not in (1, 2) or x.shape[-1] != k or x.numel() != k:
        raise ValueError(f"x: expected [K={k}] or [1, K={k}] (M = 1), got shape {tuple(x.shape)}")
    ffi.require(x, "x", dim=x.dim(), device=dev)
    return x.reshape(k)


def awq_dequant(
    qweight: torch.Tensor,  # qweight: [K, N/8] int32, packed along N, nibble order 0,4,1,5,2,6,3,7
    qzeros: torch.Tensor,  # qzeros: [K/group, N/8] int32, packed as qweight
    scales: torch.Tensor,  # scales: [K/group, N] bf16/fp16
    dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:  # [K, N] dtype
    k, n = _int4_shapes(qweight, qzeros, scales, along_n=True)
    out = torch.empty(k, n, dtype=dtype, device=qweight.device)
    lib = _lib()
    rc = lib.vt_quant_awq_dequant(ffi.ptr(qweight), ffi.ptr(qzeros), ffi.ptr(scales), ffi.ptr(out), k, n,
                                  _awq_group(k, scales), ffi.dtype_code(scales, "scales"),
                                  ffi.dtype_code(out, "dtype"), ffi.stream(qweight.device))
    ffi.check(rc, "vt_quant_awq_dequant", lib, "quant")
    return out


def gptq_dequant(
    qweight: torch.Tensor,  # qweight: [K/8, N] int32, packed along K
    qzeros: torch.Tensor,  # qzeros: [groups, N/8] int32, packed along N
    scales: torch.Tensor,  # scales: [groups, N] bf16/fp16
    g_idx: torch.Tensor,  # g_idx: [K] int, the group of each input row (act order)
    zero_offset: int,  # 1 for GPTQ v1 checkpoints (zeros stored minus one), 0 for v2
    dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:  # [K, N] dtype
    k, n = _int4_shapes(qweight, qzeros, scales, along_n=False)
    g_idx = _g_idx(g_idx, k, qweight.device)
    out = torch.empty(k, n, dtype=dtype, device=qweight.device)
    lib = _lib()
    rc = lib.vt_quant_gptq_dequant(ffi.ptr(qweight), ffi.ptr(qzeros), ffi.ptr(scales), ffi.ptr(g_idx), ffi.ptr(out),
                                   k, n, zero_offset, ffi.dtype_code(scales, "scales"), ffi.dtype_code(out, "dtype"),
                                   ffi.stream(qweight.device))
    ffi.check(rc, "vt_quant_gptq_dequant", lib, "quant")
    return out


def _g_idx(g_idx: torch.Tensor, k: int, dev: torch.device) -> torch.Tensor:
    ffi.require(g_idx, "g_idx", dim=1, device=dev, contiguous=False)
    if g_idx.shape[0] != k:
        raise ValueError(f"g_idx: shape {tuple(g_idx.shape)} != [K={k}]")
    return g_idx.to(torch.int32).contiguous()


def _nvfp4_shapes(packed: torch.Tensor, scales: torch.Tensor, global_scale: torch.Tensor) -> tuple[int, int]:
    dev = packed.device
    ffi.require(packed, "packed", dim=2, dtype=torch.uint8)
    ffi.require(scales, "scales", dim=2, dtype=torch.float8_e4m3fn, device=dev)
    ffi.require(global_scale, "global_scale", dim=global_scale.dim(), dtype=torch.float32, device=dev)
    if global_scale.numel() != 1:
        raise ValueError(f"global_scale: expected one value, got shape {tuple(global_scale.shape)}")
    n, k = packed.shape[0], packed.shape[1] * 2
    if scales.shape != (n, k // NVFP4_GROUP) or k % NVFP4_GROUP:
        raise ValueError(f"scales: shape {tuple(scales.shape)} != [N={n}, K/16={k // NVFP4_GROUP}] (K={k})")
    return n, k


def nvfp4_dequant(
    packed: torch.Tensor,  # packed: [N, K/2] uint8, value 2i in the low nibble
    scales: torch.Tensor,  # scales: [N, K/16] float8_e4m3fn
    global_scale: torch.Tensor,  # global_scale: [] or [1] fp32
    dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:  # [N, K] dtype
    n, k = _nvfp4_shapes(packed, scales, global_scale)
    out = torch.empty(n, k, dtype=dtype, device=packed.device)
    lib = _lib()
    rc = lib.vt_quant_nvfp4_dequant(ffi.ptr(packed), ffi.ptr(scales), ffi.ptr(global_scale), ffi.ptr(out), n, k,
                                    ffi.dtype_code(out, "dtype"), ffi.stream(packed.device))
    ffi.check(rc, "vt_quant_nvfp4_dequant", lib, "quant")
    return out


def awq_gemv(
    x: torch.Tensor,  # x: [K] or [1, K]
    qweight: torch.Tensor,  # qweight, qzeros, scales: as awq_dequant
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:  # [..., N] out_dtype (default x.dtype), x's leading shape
    k, n = _int4_shapes(qweight, qzeros, scales, along_n=True)
    xv = _vector(x, k, qweight.device)
    out = torch.empty(*x.shape[:-1], n, dtype=out_dtype or x.dtype, device=x.device)
    lib = _lib()
    rc = lib.vt_quant_awq_gemv(ffi.ptr(xv), ffi.ptr(qweight), ffi.ptr(qzeros), ffi.ptr(scales), ffi.ptr(out), k, n,
                               _awq_group(k, scales), ffi.dtype_code(x, "x"), ffi.dtype_code(scales, "scales"),
                               ffi.dtype_code(out, "out"), ffi.stream(x.device))
    ffi.check(rc, "vt_quant_awq_gemv", lib, "quant")
    return out


def gptq_gemv(
    x: torch.Tensor,  # x: [K] or [1, K]
    qweight: torch.Tensor,  # qweight, qzeros, scales, g_idx: as gptq_dequant
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    g_idx: torch.Tensor,
    zero_offset: int,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:  # [..., N] out_dtype (default x.dtype)
    k, n = _int4_shapes(qweight, qzeros, scales, along_n=False)
    xv = _vector(x, k, qweight.device)
    g_idx = _g_idx(g_idx, k, qweight.device)
    out = torch.empty(*x.shape[:-1], n, dtype=out_dtype or x.dtype, device=x.device)
    lib = _lib()
    rc = lib.vt_quant_gptq_gemv(ffi.ptr(xv), ffi.ptr(qweight), ffi.ptr(qzeros), ffi.ptr(scales), ffi.ptr(g_idx),
                                ffi.ptr(out), k, n, zero_offset, ffi.dtype_code(x, "x"),
                                ffi.dtype_code(scales, "scales"), ffi.dtype_code(out, "out"), ffi.stream(x.device))
    ffi.check(rc, "vt_quant_gptq_gemv", lib, "quant")
    return out


def nvfp4_gemv(
    x: torch.Tensor,  # x: [K] or [1, K]
    packed: torch.Tensor,  # packed, scales, global_scale: as nvfp4_dequant
    scales: torch.Tensor,
    global_scale: torch.Tensor,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:  # [..., N] out_dtype (default x.dtype)
    n, k = _nvfp4_shapes(packed, scales, global_scale)
    xv = _vector(x, k, packed.device)
    out = torch.empty(*x.shape[:-1], n, dtype=out_dtype or x.dtype, device=x.device)
    lib = _lib()
    rc = lib.vt_quant_nvfp4_gemv(ffi.ptr(xv), ffi.ptr(packed), ffi.ptr(scales), ffi.ptr(global_scale), ffi.ptr(out),
                                 n, k, ffi.dtype_code(x, "x"), ffi.dtype_code(out, "out"), ffi.stream(x.device))
    ffi.check(rc, "vt_quant_nvfp4_gemv", lib, "quant")
    return out
