"""Binding for the gated delta net decode-step kernel (gdn.cu): one token's recurrent update, fp32 state."""

from __future__ import annotations

import ctypes
from functools import cache

import torch

from engine.cuda import build, ffi

_P = ctypes.c_void_p
_I = ctypes.c_int
_F = ctypes.c_float
MAX_HEAD_DIM_K = 256  # gdn.cuh kMaxKDim, checked against it by the tests


# The launcher's C signature (argument kinds in order), checked against gdn.cu by the tests.
SIGNATURES: dict[str, list] = {"vt_gdn_decode": [_P] * 8 + [_I] * 5 + [_F, _I, _F, _I, _I, _P]}


@cache
def _lib() -> ctypes.CDLL:
    lib = build.load("gdn.cu")
    for name, argtypes in SIGNATURES.items():
        ffi.bind(lib, name, argtypes)
    return lib


def supports(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether the kernel takes these operands (one dtype, key dim <= 256), else use the reference."""
    return q.dtype == k.dtype == v.dtype and q.dim() == 3 and q.shape[-1] <= MAX_HEAD_DIM_K


def decode(
    q: torch.Tensor,  # q: [batch, k_heads, dk]
    k: torch.Tensor,  # k: [batch, k_heads, dk]
    v: torch.Tensor,  # v: [batch, heads, dv]
    g: torch.Tensor,  # g: [batch, heads], log decay
    beta: torch.Tensor,  # beta: [batch, heads]
    state: torch.Tensor,  # state: [batch, heads, dk, dv] fp32
    *,
    scale: float = 1.0,
    use_qk_l2norm: bool = False,
    eps: float = 1e-6,
    inplace: bool = False,
    out_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:  # (out [batch, heads, dv] out_dtype or q.dtype, new_state fp32)
    """S <- exp(g) S; delta = beta (v - S^T k); S <- S + k delta^T; out = S^T q; `inplace` writes S into state."""
    dev = q.device
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    ffi.require(q, "q", dim=3)
    ffi.require(k, "k", dim=3, dtype=q.dtype, device=dev)
    ffi.require(v, "v", dim=3, dtype=q.dtype, device=dev)
    ffi.require(state, "state", dim=4, dtype=torch.float32, device=dev)
    batch, k_heads, dk = q.shape
    heads, dv = v.shape[1], v.shape[2]
    if k.shape != q.shape:
        raise ValueError(f"k: shape {tuple(k.shape)} != q's {tuple(q.shape)}")
    if v.shape[0] != batch:
        raise ValueError(f"v: dim 0 is {v.shape[0]} but q's batch is {batch}")
    for name, t in (("g", g), ("beta", beta)):
        if t.shape != (batch, heads) or t.device != dev:
            raise ValueError(
                f"{name}: shape {tuple(t.shape)} on {t.device} is not [batch, heads] {(batch, heads)} on {dev}"
            )
    if state.shape != (batch, heads, dk, dv):
        raise ValueError(f"state: shape {tuple(state.shape)} != [batch, heads, dk, dv] {(batch, heads, dk, dv)}")
    g32 = g.to(torch.float32).contiguous()  # [batch, heads]: tiny, so the kernel reads one gate dtype
    b32 = beta.to(torch.float32).contiguous()
    new_state = state if inplace else torch.empty_like(state)
    out = torch.empty(batch, heads, dv, dtype=out_dtype or q.dtype, device=dev)
    lib = _lib()
    rc = lib.vt_gdn_decode(
        ffi.ptr(q),
        ffi.ptr(k),
        ffi.ptr(v),
        ffi.ptr(g32),
        ffi.ptr(b32),
        ffi.ptr(state),
        ffi.ptr(new_state),
        ffi.ptr(out),
        batch,
        heads,
        k_heads,
        dk,
        dv,
        scale,
        int(use_qk_l2norm),
        eps,
        ffi.dtype_code(q, "q"),
        ffi.dtype_code(out, "out"),
        ffi.stream(dev),
    )
    ffi.check(rc, "vt_gdn_decode", lib, "gdn")
    return out, new_state
