"""Binding for the decode GEMV (gemv.cu): y = x W^T (+ bias) for a few rows of x, output in the caller's dtype."""

from __future__ import annotations

import ctypes
from functools import cache

import torch

from engine.cuda import build, ffi

_P = ctypes.c_void_p
_I = ctypes.c_int
_L = ctypes.c_longlong

MAX_ROWS = 8  # the GEMV reads W once per row of x: past a few rows a GEMM is the better kernel


SIGNATURES: dict[str, list] = {  # launcher -> argtypes (a test holds them to gemv.cu)
    "vt_gemv_gemv": [_P, _P, _P, _P, _I, _I, _I, _L, _L, _L, _I, _I, _P],
}


@cache
def _lib() -> ctypes.CDLL:
    lib = build.load("gemv.cu")
    for name, argtypes in SIGNATURES.items():
        ffi.bind(lib, name, argtypes)
    return lib


def linear(
    x: torch.Tensor,  # x: [..., in_features], at most MAX_ROWS rows
    weight: torch.Tensor,  # weight: [out_features, in_features], x.dtype, last dim contiguous
    bias: torch.Tensor | None = None,  # bias: [out_features], x.dtype
    out_dtype: torch.dtype | None = None,  # default x.dtype: the output follows the caller
) -> torch.Tensor:  # [..., out_features], out_dtype
    """`F.linear(x, weight, bias)` accumulated in fp32 and rounded once to `out_dtype`."""
    if not x.is_cuda:
        raise ValueError(f"x: expected a CUDA tensor, got device {x.device}")
    if x.dim() < 1:
        raise ValueError("x: expected at least 1 dim, got a scalar")
    ffi.require(weight, "weight", dim=2, dtype=x.dtype, device=x.device, contiguous=False)
    n, k = weight.shape
    if x.shape[-1] != k:
        raise ValueError(f"weight: dim 1 is {k} but x's last dim (in_features) is {x.shape[-1]}")
    if bias is not None:
        ffi.require(bias, "bias", dim=1, dtype=x.dtype, device=x.device)
        if bias.shape[0] != n:
            raise ValueError(f"bias: dim 0 is {bias.shape[0]} but weight's out_features is {n}")
    if weight.stride(1) != 1:
        weight = weight.contiguous()
    x2 = x.reshape(-1, k)
    if x2.stride(-1) != 1 or (x2.shape[0] > 1 and x2.stride(0) < k):  # e.g. rows broadcast by expand()
        x2 = x2.contiguous()
    m = x2.shape[0]
    if m > MAX_ROWS:
        raise ValueError(f"x: {m} rows exceed the GEMV's MAX_ROWS={MAX_ROWS}; use a GEMM")
    out_dtype = out_dtype or x.dtype
    y = torch.empty(m, n, dtype=out_dtype, device=x.device)
    ldw = weight.stride(0) if n > 1 else k
    ldx = x2.stride(0) if m > 1 else k
    lib = _lib()
    rc = lib.vt_gemv_gemv(
        ffi.ptr(y),
        ffi.ptr(weight),
        ffi.ptr(x2),
        ffi.ptr(bias) if bias is not None else None,
        m,
        n,
        k,
        ldw,
        ldx,
        n,
        ffi.dtype_code(x, "x"),
        ffi.dtype_code(y, "out_dtype"),
        ffi.stream(x.device),
    )
    ffi.check(rc, "vt_gemv_gemv", lib, "gemv")
    return y.view(*x.shape[:-1], n)
