"""Binding for the norm kernels (norm.cu): RMSNorm and fused add+RMSNorm on CUDA tensors."""

from __future__ import annotations

import ctypes
from functools import cache

import torch

from engine.cuda import build, ffi

_P = ctypes.c_void_p
_I = ctypes.c_int
_L = ctypes.c_longlong
_F = ctypes.c_float


SIGNATURES: dict[str, list] = {  # launcher -> argtypes (a test holds them to norm.cu)
    "vt_norm_rms_norm": [_P, _P, _P, _I, _I, _L, _L, _F, _F, _I, _P],
    "vt_norm_fused_add_rms_norm": [_P, _P, _P, _P, _P, _I, _I, _L, _L, _L, _L, _F, _F, _I, _P],
}


@cache
def _lib() -> ctypes.CDLL:
    lib = build.load("norm.cu")
    for name, argtypes in SIGNATURES.items():
        ffi.bind(lib, name, argtypes)
    return lib


def mean_scale(rows: int, hidden: int) -> float:
    """The fp32 factor torch's CUDA mean applies to a sum: float(rows) / float(rows * hidden), rounded as fp32."""
    if rows <= 0:
        return 0.0
    f32 = torch.float32
    return (torch.tensor(float(rows), dtype=f32) / torch.tensor(float(rows * hidden), dtype=f32)).item()


def rows(t: torch.Tensor) -> tuple[torch.Tensor, int]:
    """`t` as [rows, last] with a contiguous last dim (a view where torch can make one) and its row stride."""
    t2 = t.reshape(-1, t.shape[-1])
    if t2.stride(-1) != 1 or (t2.shape[0] > 1 and t2.stride(0) < t2.shape[1]):
        t2 = t2.contiguous()  # the kernels walk rows by a stride of at least the row length
    return t2, (t2.stride(0) if t2.shape[0] > 1 else t2.shape[1])


def _check(x: torch.Tensor, weight: torch.Tensor) -> None:
    if not x.is_cuda:
        raise ValueError(f"x: expected a CUDA tensor, got device {x.device}")
    if x.dim() < 1:
        raise ValueError("x: expected at least 1 dim, got a scalar")
    ffi.require(weight, "weight", dim=1, dtype=x.dtype, device=x.device)
    if weight.shape[0] != x.shape[-1]:
        raise ValueError(f"weight: dim 0 is {weight.shape[0]} but x's last dim (hidden) is {x.shape[-1]}")


def supports(x: torch.Tensor, weight: torch.Tensor, eps: float = 0.0) -> bool:
    """What the RMSNorm kernel needs of inputs past the op's check (engine/ops/norm.py: ranks, dtypes, hidden): a
    contiguous weight on x's device. The table's arm asks this, then launches unchecked (`launch_rms_norm`)."""
    return weight.device == x.device and weight.is_contiguous()


def supports_add(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 0.0) -> bool:
    """`supports`, and the residual on x's device (the kernel walks it by rows, any row stride)."""
    return residual.device == x.device and supports(x, weight)


def rms_norm(
    x: torch.Tensor,  # x: [..., hidden]
    weight: torch.Tensor,  # weight: [hidden], x.dtype
    eps: float,
) -> torch.Tensor:  # [..., hidden], x.dtype
    """`launch_rms_norm` after the checks that name the bad tensor: the entry for a direct call."""
    _check(x, weight)
    return launch_rms_norm(x, weight, eps)


def launch_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The RMSNorm launch, its inputs already checked (by `rms_norm`, or by the table's check and `supports`)."""
    x2, xs = rows(x)
    out = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    lib = _lib()
    rc = lib.vt_norm_rms_norm(
        *ffi.ptrs(out, x2, weight),
        x2.shape[0],
        x2.shape[1],
        xs,
        x2.shape[1],
        mean_scale(*x2.shape),
        eps,
        ffi.dtype_code(x, "x"),
        ffi.stream(x.device),
    )
    ffi.check(rc, "vt_norm_rms_norm", lib, "norm")
    return out.view(x.shape)


def fused_add_rms_norm(
    x: torch.Tensor,  # x: [..., hidden]
    residual: torch.Tensor,  # residual: [..., hidden], x.dtype
    weight: torch.Tensor,  # weight: [hidden], x.dtype
    eps: float,
    inplace: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:  # (normed, new_residual), both [..., hidden], x.dtype
    """`new_residual = (x + residual)` rounded to x.dtype, then rms_norm of it; `inplace` writes it into residual.
    `launch_fused_add_rms_norm` after the checks that name the bad tensor."""
    _check(x, weight)
    if residual.shape != x.shape:
        raise ValueError(f"residual: shape {tuple(residual.shape)} != x's {tuple(x.shape)}")
    ffi.require(residual, "residual", dim=x.dim(), dtype=x.dtype, device=x.device, contiguous=False)
    return launch_fused_add_rms_norm(x, residual, weight, eps, inplace)


def launch_fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, inplace: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused add + RMSNorm launch, its inputs already checked (by `fused_add_rms_norm`, or by the table's
    check and `supports`)."""
    x2, xs = rows(x)
    r_in, rs_in = rows(residual)
    if inplace and r_in.data_ptr() != residual.data_ptr():
        raise ValueError(f"residual: inplace needs a last-dim-contiguous residual (strides {residual.stride()})")
    if inplace:
        r_out, rs_out = r_in, rs_in
    else:
        r_out, rs_out = torch.empty(r_in.shape, dtype=x.dtype, device=x.device), r_in.shape[1]
    out = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    lib = _lib()
    rc = lib.vt_norm_fused_add_rms_norm(
        *ffi.ptrs(out, r_out, r_in, x2, weight),
        x2.shape[0],
        x2.shape[1],
        x2.shape[1],
        rs_out,
        rs_in,
        xs,
        mean_scale(*x2.shape),
        eps,
        ffi.dtype_code(x, "x"),
        ffi.stream(x.device),
    )
    ffi.check(rc, "vt_norm_fused_add_rms_norm", lib, "norm")
    return out.view(x.shape), (residual if inplace else r_out.view(x.shape))
