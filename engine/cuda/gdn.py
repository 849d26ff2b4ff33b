"""Binding for the gated delta net decode kernel (gdn.cu): one token's recurrent update; fp32 state."""

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
SIGNATURES: dict[str, list] = {
    "vt_gdn_decode": [_P] * 8 + [_I] * 5 + [_F, _I, _F, _I, _I, _P],
}


@cache
def _lib() -> ctypes.CDLL:
    lib = build.load("gdn.cu")
    for name, argtypes in SIGNATURES.items():
        ffi.bind(lib, name, argtypes)
    return lib


def supports(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether the kernel takes these operands (one dtype, key dim <= 256), else use the reference."""
    return q.dtype == k.dtype == v.dtype and q.dim() == 3 and q.shape[-1] <= MAX_HEAD_DIM_K


def supports_decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    **_: object,
) -> bool:
    """What the decode kernel needs past the op's check (engine/ops/gdn.py: ranks, shapes, an fp32 state): `supports`,
    a contiguous state and every tensor on q's device. The table's arm asks this, then runs `launch_decode`."""
    same = all(t.device == q.device for t in (k, v, g, beta, state))
    return same and supports(q, k, v) and state.is_contiguous()


def check_inputs(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The launcher's checks, naming the tensor: q, k, v of one token ([batch, heads, d]), one dtype and device; g
    and beta [batch, heads]; an fp32 state [batch, heads, dk, dv]. Returns q, k, v contiguous."""
    dev = q.device
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    ffi.require(q, "q", dim=3)
    ffi.require(k, "k", dim=3, dtype=q.dtype, device=dev)
    ffi.require(v, "v", dim=3, dtype=q.dtype, device=dev)
    ffi.require(state, "state", dim=4, dtype=torch.float32, device=dev)
    lead, lead_names = tuple(q.shape[:-2]), "[batch]"
    batch, dk, heads, dv = q.shape[0], q.shape[-1], v.shape[-2], v.shape[-1]
    if k.shape != q.shape:
        raise ValueError(f"k: shape {tuple(k.shape)} != q's {tuple(q.shape)}")
    if tuple(v.shape[:-2]) != lead:
        raise ValueError(f"v: shape {tuple(v.shape)} does not lead with q's {lead_names} {lead}")
    gate_names = lead_names[:-1] + ", heads]"
    for name, t in (("g", g), ("beta", beta)):
        if t.shape != (*lead, heads) or t.device != dev:
            raise ValueError(
                f"{name}: shape {tuple(t.shape)} on {t.device} is not {gate_names} {(*lead, heads)} on {dev}"
            )
    if state.shape != (batch, heads, dk, dv):
        raise ValueError(f"state: shape {tuple(state.shape)} != [batch, heads, dk, dv] {(batch, heads, dk, dv)}")
    return q, k, v


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
    """S <- exp(g) S; delta = beta (v - S^T k); S <- S + k delta^T; out = S^T q; `inplace` writes S into state.
    `launch_decode` after the checks that name the bad tensor: the entry for a direct call."""
    q, k, v = check_inputs(q, k, v, g, beta, state)
    opts = (scale, use_qk_l2norm, eps, inplace, out_dtype)
    return launch_decode(q, k, v, g, beta, state, *opts)


def launch_decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    scale: float = 1.0,
    use_qk_l2norm: bool = False,
    eps: float = 1e-6,
    inplace: bool = False,
    out_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The decode launch, its inputs already checked (by `decode`, or by the table's check and its `supports`)."""
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    batch, k_heads, dk = q.shape
    heads, dv = v.shape[1], v.shape[2]
    new_state = state if inplace else torch.empty_like(state)
    out = torch.empty(batch, heads, dv, dtype=out_dtype or q.dtype, device=q.device)
    dims = (batch, heads, k_heads, dk, dv)
    _launch("vt_gdn_decode", (q, k, v, g, beta, state, new_state, out), dims, (scale, use_qk_l2norm, eps))
    return out, new_state


def _launch(name: str, tensors: tuple[torch.Tensor, ...], dims: tuple[int, ...], options: tuple) -> None:
    """The launcher's call on checked inputs: `tensors` (q, k, v, g, beta, state, new_state, out) with the gates as
    fp32 (tiny, so the kernel reads one gate dtype), the sizes and (scale, use_qk_l2norm, eps) in their order."""
    q, k, v, g, beta, state, new_state, out = tensors
    gates = g.to(torch.float32).contiguous(), beta.to(torch.float32).contiguous()
    scale, use_qk_l2norm, eps = options
    lib = _lib()
    pointers = ffi.ptrs(q, k, v, *gates, state, new_state, out)
    codes = (ffi.dtype_code(q, "q"), ffi.dtype_code(out, "out"))
    rc = getattr(lib, name)(*pointers, *dims, scale, int(use_qk_l2norm), eps, *codes, ffi.stream(q.device))
    ffi.check(rc, name, lib, "gdn")
