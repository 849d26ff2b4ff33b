"""Binding for the activation kernel (act.cu): SiLU-and-mul on CUDA tensors."""

from __future__ import annotations

import ctypes
from functools import cache

import torch

from engine.cuda import build, ffi
from engine.cuda.norm import rows

_P = ctypes.c_void_p
_I = ctypes.c_int
_L = ctypes.c_longlong


SIGNATURES: dict[str, list] = {  # launcher -> argtypes (a test holds them to act.cu)
    "vt_act_silu_and_mul": [_P, _P, _I, _I, _L, _L, _I, _P],
}


@cache
def _lib() -> ctypes.CDLL:
    lib = build.load("act.cu")
    for name, argtypes in SIGNATURES.items():
        ffi.bind(lib, name, argtypes)
    return lib


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:  # x: [..., 2*I] -> [..., I], x.dtype
    if not x.is_cuda:
        raise ValueError(f"x: expected a CUDA tensor, got device {x.device}")
    if x.dim() < 1 or x.shape[-1] % 2:
        raise ValueError(f"x: last dim must be even (gate and up halves), got shape {tuple(x.shape)}")
    x2, xs = rows(x)
    inter = x2.shape[1] // 2
    out = torch.empty(x2.shape[0], inter, dtype=x.dtype, device=x.device)
    lib = _lib()
    rc = lib.vt_act_silu_and_mul(
        ffi.ptr(out), ffi.ptr(x2), x2.shape[0], inter, xs, inter, ffi.dtype_code(x, "x"), ffi.stream(x.device)
    )
    ffi.check(rc, "vt_act_silu_and_mul", lib, "act")
    return out.view(*x.shape[:-1], inter)
