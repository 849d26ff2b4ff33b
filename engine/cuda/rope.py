"""Binding for the RoPE kernels (rope.cu): neox RoPE, and Qwen3's q/k RMSNorm fused with it, on CUDA tensors."""

from __future__ import annotations

import ctypes
from functools import cache

import torch

from engine.cuda import build, ffi
from engine.cuda.norm import mean_scale

_P = ctypes.c_void_p
_I = ctypes.c_int
_L = ctypes.c_longlong
_F = ctypes.c_float


SIGNATURES: dict[str, list] = {  # launcher -> argtypes (a test holds them to rope.cu)
    "vt_rope_neox": [_P, _P, _P, _P, _L, _I, _I, _L, _L, _I, _P],
    "vt_rope_qk_norm_rope": [_P, _P, _P, _P, _P, _L, _I, _I, _L, _L, _F, _F, _I, _P],
}


@cache
def _lib() -> ctypes.CDLL:
    lib = build.load("rope.cu")
    for name, argtypes in SIGNATURES.items():
        ffi.bind(lib, name, argtypes)
    return lib


def _prepare(
    x: torch.Tensor,  # x: [tokens, heads, head_dim]
    cos: torch.Tensor,  # cos: [tokens, head_dim], x.dtype
    sin: torch.Tensor,  # sin: [tokens, head_dim], x.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Checked inputs (x with a contiguous last dim, cos/sin contiguous) and a fresh contiguous output."""
    if not x.is_cuda:
        raise ValueError(f"x: expected a CUDA tensor, got device {x.device}")
    ffi.require(x, "x", dim=3, contiguous=False)
    tokens, _, head_dim = x.shape
    if head_dim % 2:
        raise ValueError(f"x: head_dim must be even, got shape {tuple(x.shape)}")
    for name, t in (("cos", cos), ("sin", sin)):
        ffi.require(t, name, dim=2, dtype=x.dtype, device=x.device, contiguous=False)
        if tuple(t.shape) != (tokens, head_dim):
            raise ValueError(f"{name}: shape {tuple(t.shape)} != (tokens, head_dim) = {(tokens, head_dim)}")
    tok_stride, head_stride = _strides(x)
    if x.stride(-1) != 1 or head_stride < head_dim or (tokens > 1 and tok_stride < head_stride * x.shape[1]):
        x = x.contiguous()  # the kernel walks rows by (token, head) strides over a contiguous last dim
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    return x, cos.contiguous(), sin.contiguous(), out


def _strides(x: torch.Tensor) -> tuple[int, int]:
    """(token stride, head stride) with the degenerate size-1 dims given their dense values."""
    tokens, heads, head_dim = x.shape
    head = x.stride(1) if heads > 1 else head_dim
    return (x.stride(0) if tokens > 1 else head * heads), head


def apply_rope_neox(
    x: torch.Tensor,  # x: [tokens, heads, head_dim]
    cos: torch.Tensor,  # cos: [tokens, head_dim], x.dtype
    sin: torch.Tensor,  # sin: [tokens, head_dim], x.dtype
) -> torch.Tensor:  # [tokens, heads, head_dim], x.dtype
    x, cos, sin, out = _prepare(x, cos, sin)
    tok_stride, head_stride = _strides(x)
    lib = _lib()
    rc = lib.vt_rope_neox(
        ffi.ptr(out),
        ffi.ptr(x),
        ffi.ptr(cos),
        ffi.ptr(sin),
        x.shape[0],
        x.shape[1],
        x.shape[2],
        tok_stride,
        head_stride,
        ffi.dtype_code(x, "x"),
        ffi.stream(x.device),
    )
    ffi.check(rc, "vt_rope_neox", lib, "rope")
    return out


def qk_norm_rope(
    x: torch.Tensor,  # x: [tokens, heads, head_dim]
    weight: torch.Tensor,  # weight: [head_dim], x.dtype
    cos: torch.Tensor,  # cos: [tokens, head_dim], x.dtype
    sin: torch.Tensor,  # sin: [tokens, head_dim], x.dtype
    eps: float,
) -> torch.Tensor:  # [tokens, heads, head_dim], x.dtype
    """`apply_rope_neox(qk_norm(x, weight, eps), cos, sin)` in one launch, with the same rounding points."""
    x, cos, sin, out = _prepare(x, cos, sin)
    ffi.require(weight, "weight", dim=1, dtype=x.dtype, device=x.device)
    if weight.shape[0] != x.shape[2]:
        raise ValueError(f"weight: dim 0 is {weight.shape[0]} but x's head_dim is {x.shape[2]}")
    tok_stride, head_stride = _strides(x)
    lib = _lib()
    rc = lib.vt_rope_qk_norm_rope(
        ffi.ptr(out),
        ffi.ptr(x),
        ffi.ptr(weight),
        ffi.ptr(cos),
        ffi.ptr(sin),
        x.shape[0],
        x.shape[1],
        x.shape[2],
        tok_stride,
        head_stride,
        mean_scale(x.shape[0] * x.shape[1], x.shape[2]),
        eps,
        ffi.dtype_code(x, "x"),
        ffi.stream(x.device),
    )
    ffi.check(rc, "vt_rope_qk_norm_rope", lib, "rope")
    return out
