"""Binding for the quantised-weight kernels (quant.cu): AWQ, GPTQ and NVFP4 dequant and M=1 dequant-GEMV.

Signatures follow the references in engine/ops/{awq,gptq,nvfp4}.py; the dequants are bit-exact to them,
the GEMVs (`*_linear`, one row of x) agree with dequant-then-linear within the output dtype's tolerance.
"""
from __future__ import annotations

import ctypes
from functools import cache

import torch

from engine.cuda import build, ffi

_P = ctypes.c_void_p
_I = ctypes.c_int
PACK = 8  # int4 values per int32 word
NVFP4_BLOCK = 16  # values per fp8 block scale
GPTQ_ZERO_OFFSET = {1: 1, 2: 0}  # format version -> added to the stored zero


# The launchers' C signatures (argument kinds in order), checked against quant.cu by the tests.
SIGNATURES: dict[str, list] = {
    "vt_quant_awq_dequant": [_P] * 4 + [_I] * 5 + [_P],
    "vt_quant_gptq_dequant": [_P] * 5 + [_I] * 5 + [_P],
    "vt_quant_nvfp4_dequant": [_P] * 4 + [_I] * 3 + [_P],
    "vt_quant_awq_gemv": [_P] * 7 + [_I] * 6 + [_P],
    "vt_quant_gptq_gemv": [_P] * 8 + [_I] * 6 + [_P],
    "vt_quant_nvfp4_gemv": [_P] * 6 + [_I] * 4 + [_P],
    "vt_quant_gemv_max_splits": [],
}


@cache
def _lib() -> ctypes.CDLL:
    lib = build.load("quant.cu")
    for name, argtypes in SIGNATURES.items():
        ffi.bind(lib, name, argtypes)
    return lib


def dequant_awq(
    qweight: torch.Tensor,  # qweight: [K, N/8] int32, packed along N, nibble order 0,4,1,5,2,6,3,7
    qzeros: torch.Tensor,  # qzeros: [K/group, N/8] int32
    scales: torch.Tensor,  # scales: [K/group, N]
    group_size: int,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:  # [K, N], dtype (default scales.dtype)
    k, n = _int4(qweight, qzeros, scales, along_n=True)
    _group(k, group_size, scales)
    out = torch.empty(k, n, dtype=dtype or scales.dtype, device=qweight.device)
    lib = _lib()
    rc = lib.vt_quant_awq_dequant(ffi.ptr(qweight), ffi.ptr(qzeros), ffi.ptr(scales), ffi.ptr(out), k, n, group_size,
                                  ffi.dtype_code(scales, "scales"), ffi.dtype_code(out, "dtype"),
                                  ffi.stream(qweight.device))
    ffi.check(rc, "vt_quant_awq_dequant", lib, "quant")
    return out


def dequant_gptq(
    qweight: torch.Tensor,  # qweight: [K/8, N] int32, packed along K
    qzeros: torch.Tensor,  # qzeros: [groups, N/8] int32, packed along N
    scales: torch.Tensor,  # scales: [groups, N]
    g_idx: torch.Tensor,  # g_idx: [K] int in [0, groups), the group of each input row (act order)
    bits: int = 4,
    version: int = 1,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:  # [K, N], dtype (default scales.dtype)
    k, n = _int4(qweight, qzeros, scales, along_n=False)
    g32 = _g_idx(g_idx, k, bits, version, qweight.device)
    out = torch.empty(k, n, dtype=dtype or scales.dtype, device=qweight.device)
    lib = _lib()
    rc = lib.vt_quant_gptq_dequant(ffi.ptr(qweight), ffi.ptr(qzeros), ffi.ptr(scales), ffi.ptr(g32), ffi.ptr(out), k,
                                   n, GPTQ_ZERO_OFFSET[version], ffi.dtype_code(scales, "scales"),
                                   ffi.dtype_code(out, "dtype"), ffi.stream(qweight.device))
    ffi.check(rc, "vt_quant_gptq_dequant", lib, "quant")
    return out


def dequant_nvfp4(
    packed: torch.Tensor,  # packed: [N, K/2] uint8, value 2i in the low nibble
    block_scales: torch.Tensor,  # block_scales: [N, K/16] float8_e4m3fn
    global_scale: torch.Tensor | float,  # [] or [1] fp32, or a float
    dtype: torch.dtype,
) -> torch.Tensor:  # [N, K], dtype
    n, k, gs = _nvfp4(packed, block_scales, global_scale)
    out = torch.empty(n, k, dtype=dtype, device=packed.device)
    lib = _lib()
    rc = lib.vt_quant_nvfp4_dequant(ffi.ptr(packed), ffi.ptr(block_scales), ffi.ptr(gs), ffi.ptr(out), n, k,
                                    ffi.dtype_code(out, "dtype"), ffi.stream(packed.device))
    ffi.check(rc, "vt_quant_nvfp4_dequant", lib, "quant")
    return out


def awq_linear(
    x: torch.Tensor,  # x: [..., K], one row in all (M = 1)
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    group_size: int,
    bias: torch.Tensor | None = None,  # bias: [N], x.dtype
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:  # [..., N], out_dtype (default x.dtype)
    k, n = _int4(qweight, qzeros, scales, along_n=True)
    _group(k, group_size, scales)
    xv, out, b = _gemv_io(x, k, n, bias, out_dtype, qweight.device)
    lib = _lib()
    partial = _partial(lib, n, x.device)
    rc = lib.vt_quant_awq_gemv(ffi.ptr(xv), ffi.ptr(qweight), ffi.ptr(qzeros), ffi.ptr(scales), _ptr_or_null(b),
                               ffi.ptr(partial), ffi.ptr(out), k, n, group_size, ffi.dtype_code(x, "x"),
                               ffi.dtype_code(scales, "scales"), ffi.dtype_code(out, "out"), ffi.stream(x.device))
    ffi.check(rc, "vt_quant_awq_gemv", lib, "quant")
    return out


def gptq_linear(
    x: torch.Tensor,  # x: [..., K], one row in all (M = 1)
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    g_idx: torch.Tensor,
    bits: int = 4,
    version: int = 1,
    bias: torch.Tensor | None = None,  # bias: [N], x.dtype
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:  # [..., N], out_dtype (default x.dtype)
    k, n = _int4(qweight, qzeros, scales, along_n=False)
    g32 = _g_idx(g_idx, k, bits, version, qweight.device)
    xv, out, b = _gemv_io(x, k, n, bias, out_dtype, qweight.device)
    lib = _lib()
    partial = _partial(lib, n, x.device)
    rc = lib.vt_quant_gptq_gemv(ffi.ptr(xv), ffi.ptr(qweight), ffi.ptr(qzeros), ffi.ptr(scales), ffi.ptr(g32),
                                _ptr_or_null(b), ffi.ptr(partial), ffi.ptr(out), k, n, GPTQ_ZERO_OFFSET[version],
                                ffi.dtype_code(x, "x"), ffi.dtype_code(scales, "scales"), ffi.dtype_code(out, "out"),
                                ffi.stream(x.device))
    ffi.check(rc, "vt_quant_gptq_gemv", lib, "quant")
    return out


def nvfp4_linear(
    x: torch.Tensor,  # x: [..., K], one row in all (M = 1)
    packed: torch.Tensor,
    block_scales: torch.Tensor,
    global_scale: torch.Tensor | float,
    bias: torch.Tensor | None = None,  # bias: [N], x.dtype
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:  # [..., N], out_dtype (default x.dtype)
    n, k, gs = _nvfp4(packed, block_scales, global_scale)
    xv, out, b = _gemv_io(x, k, n, bias, out_dtype, packed.device)
    lib = _lib()
    rc = lib.vt_quant_nvfp4_gemv(ffi.ptr(xv), ffi.ptr(packed), ffi.ptr(block_scales), ffi.ptr(gs), _ptr_or_null(b),
                                 ffi.ptr(out), n, k, ffi.dtype_code(x, "x"), ffi.dtype_code(out, "out"),
                                 ffi.stream(x.device))
    ffi.check(rc, "vt_quant_nvfp4_gemv", lib, "quant")
    return out


def _partial(lib: ctypes.CDLL, n: int, dev: torch.device) -> torch.Tensor:
    """The fp32 workspace of an int4 GEMV's K-split partial sums: [max splits, N]."""
    return torch.empty(lib.vt_quant_gemv_max_splits(), n, dtype=torch.float32, device=dev)


def _int4(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, along_n: bool) -> tuple[int, int]:
    """(K, N) of an int4 checkpoint, after checking every tensor's rank, dtype, device and shape."""
    dev = qweight.device
    ffi.require(qweight, "qweight", dim=2, dtype=torch.int32)
    ffi.require(qzeros, "qzeros", dim=2, dtype=torch.int32, device=dev)
    ffi.require(scales, "scales", dim=2, device=dev)
    ffi.dtype_code(scales, "scales")
    k, n = (qweight.shape[0], qweight.shape[1] * PACK) if along_n else (qweight.shape[0] * PACK, qweight.shape[1])
    if scales.shape[1] != n or n % PACK:
        raise ValueError(f"scales: shape {tuple(scales.shape)} is not [groups, N={n}] with N a multiple of 8")
    if qzeros.shape != (scales.shape[0], n // PACK):
        raise ValueError(f"qzeros: shape {tuple(qzeros.shape)} != [groups={scales.shape[0]}, N/8={n // PACK}]")
    return k, n


def _group(k: int, group_size: int, scales: torch.Tensor) -> None:
    if group_size < 1 or k % group_size or scales.shape[0] != k // group_size:
        raise ValueError(f"group_size: {group_size} must divide K={k} into scales' {scales.shape[0]} groups")


def _g_idx(g_idx: torch.Tensor, k: int, bits: int, version: int, dev: torch.device) -> torch.Tensor:
    """g_idx as contiguous int32; its values must lie in [0, groups) (the reference checks them)."""
    if bits != 4:
        raise ValueError(f"bits: the GPTQ kernels take 4-bit checkpoints, got {bits}")
    if version not in GPTQ_ZERO_OFFSET:
        raise ValueError(f"version: {version} is not a GPTQ format version (1 or 2)")
    ffi.require(g_idx, "g_idx", dim=1, device=dev, contiguous=False)
    if g_idx.shape[0] != k or g_idx.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"g_idx: {g_idx.dtype} shape {tuple(g_idx.shape)} is not int32/int64 [K={k}]")
    return g_idx.to(torch.int32).contiguous()


def _nvfp4(packed: torch.Tensor, block_scales: torch.Tensor, global_scale: torch.Tensor | float
           ) -> tuple[int, int, torch.Tensor]:
    """(N, K, the global scale as a device fp32 scalar) after the shape and dtype checks."""
    dev = packed.device
    ffi.require(packed, "packed", dim=2, dtype=torch.uint8)
    ffi.require(block_scales, "block_scales", dim=2, dtype=torch.float8_e4m3fn, device=dev)
    if isinstance(global_scale, torch.Tensor):
        if global_scale.dtype != torch.float32 or global_scale.numel() != 1:
            raise ValueError(f"global_scale: expected one fp32 value, got {global_scale.dtype} "
                             f"shape {tuple(global_scale.shape)}")
        gs = global_scale.reshape(1).to(dev)
    else:
        gs = torch.tensor([float(global_scale)], dtype=torch.float32, device=dev)
    n, k = packed.shape[0], packed.shape[1] * 2
    if k % NVFP4_BLOCK or block_scales.shape != (n, k // NVFP4_BLOCK):
        raise ValueError(f"block_scales: shape {tuple(block_scales.shape)} != [N={n}, K/16] for K={k} "
                         f"(K must be a multiple of 16)")
    return n, k, gs


def _gemv_io(x: torch.Tensor, k: int, n: int, bias: torch.Tensor | None, out_dtype: torch.dtype | None,
             dev: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """x as a contiguous [K] row, the [..., N] output, and the contiguous bias (the caller keeps them alive
    until the launch, so the allocator cannot hand their memory to the workspace)."""
    if x.dim() < 1 or x.shape[-1] != k or x.numel() != k:
        raise ValueError(f"x: expected one row [..., K={k}] (M = 1), got shape {tuple(x.shape)}")
    if x.device != dev:
        raise ValueError(f"x: expected device {dev}, got {x.device}")
    ffi.dtype_code(x, "x")
    if bias is not None:
        bias = bias.contiguous()
        ffi.require(bias, "bias", dim=1, dtype=x.dtype, device=dev)
        if bias.shape[0] != n:
            raise ValueError(f"bias: shape {tuple(bias.shape)} != [N={n}]")
    out = torch.empty(*x.shape[:-1], n, dtype=out_dtype or x.dtype, device=dev)
    return x.reshape(k).contiguous(), out, bias


def _ptr_or_null(t: torch.Tensor | None) -> ctypes.c_void_p:
    return ctypes.c_void_p(None) if t is None else ffi.ptr(t)
