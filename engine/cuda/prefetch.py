"""Binding for the L2 prefetch (prefetch.cu, sm_90): asks L2 for the bytes of up to MAX_RANGES tensors on the
current stream, fire and forget. It changes no value; a later kernel's loads of those tensors hit L2."""

from __future__ import annotations

import ctypes
from functools import cache

import torch

from engine.cuda import build, device, ffi

_P = ctypes.c_void_p
_L = ctypes.c_longlong

MAX_RANGES = 4  # kMaxRanges: the ranges one launch takes
ALIGN = 16  # kAlign: the bulk prefetch's address and size granule
CAPABILITY = (9, 0)  # cp.async.bulk.prefetch.L2; the table checks it (the arm declares it), the launcher refuses below
NEEDS = f"1 to {MAX_RANGES} contiguous CUDA tensors on one device, each from a {ALIGN}-byte aligned address"

SIGNATURES: dict[str, list] = {  # launcher -> argtypes (a test holds them to prefetch.cu)
    "vt_prefetch_max_ranges": [],
    "vt_prefetch_l2": [_P, _L] * MAX_RANGES + [_P],
}


@cache
def _lib() -> ctypes.CDLL:
    lib = build.load("prefetch.cu")
    for name, argtypes in SIGNATURES.items():
        ffi.bind(lib, name, argtypes)
    return lib


def refusal(*tensors: torch.Tensor) -> str | None:
    """Why the launcher cannot take these tensors, naming the one at fault (None where it can). A tensor's layout is
    checked before its device, so those checks answer the same with or without a GPU."""
    if not 1 <= len(tensors) <= MAX_RANGES:
        return f"tensors: {len(tensors)} given, the launcher takes 1 to {MAX_RANGES}"
    for i, t in enumerate(tensors):
        if not t.is_contiguous():
            return f"tensors[{i}]: must be contiguous (strides {t.stride()})"
        if t.data_ptr() % ALIGN:
            return f"tensors[{i}]: address {t.data_ptr():#x} is not {ALIGN}-byte aligned"
        if not t.is_cuda:
            return f"tensors[{i}]: expected a CUDA tensor, got device {t.device}"
        if t.device != tensors[0].device:
            return f"tensors[{i}]: on {t.device}, tensors[0] on {tensors[0].device}"
    return None


def supports(*tensors: torch.Tensor) -> bool:
    """What the table's arm takes past the op's check (sm_90 is the table's to check: the arm declares CAPABILITY)."""
    return refusal(*tensors) is None


def l2_prefetch(*tensors: torch.Tensor) -> None:
    """Ask L2 for every byte of `tensors` (the last bytes short of 16 left out); an error names the tensor the
    launcher cannot take, or the device below sm_90."""
    why = refusal(*tensors)
    lacking = device.probe_of(tensors[0]).lacks(CAPABILITY) if why is None else None
    if why is not None or lacking is not None:
        raise ValueError(why or f"the bulk L2 prefetch needs {lacking}")
    ranges: list[int | None] = []
    for t in tensors:
        ranges += [t.data_ptr(), t.numel() * t.element_size() // ALIGN * ALIGN]
    ranges += [None, 0] * (MAX_RANGES - len(tensors))
    lib = _lib()
    rc = lib.vt_prefetch_l2(*ranges, ffi.stream(tensors[0].device))
    ffi.check(rc, "vt_prefetch_l2", lib, "prefetch")
