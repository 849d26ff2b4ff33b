"""ctypes helpers shared by the kernel bindings: dtype codes, raw pointers, the current stream, error checks."""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from _ctypes import CFuncPtr  # what ctypes.CDLL attributes are (ctypes._CFuncPtr at run time)

# Dtype codes shared with engine/cuda/common.cuh (vt::DType).
DTYPE_CODES: dict[torch.dtype, int] = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}


def dtype_code(t: torch.Tensor, name: str) -> int:
    if t.dtype not in DTYPE_CODES:
        raise TypeError(f"{name}: dtype {t.dtype} is not supported (fp32, bf16, fp16)")
    return DTYPE_CODES[t.dtype]


def ptr(t: torch.Tensor) -> ctypes.c_void_p:
    return ctypes.c_void_p(t.data_ptr())


def ptrs(*tensors: torch.Tensor | None) -> list[ctypes.c_void_p | None]:
    """The raw pointers of a launcher's tensor arguments, in order; None (a null pointer) for a missing one."""
    return [None if t is None else ptr(t) for t in tensors]


def stream(device: torch.device) -> ctypes.c_void_p:
    """The current torch stream on `device`, as the launcher's `void* stream`."""
    return ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)


def require(
    t: torch.Tensor,
    name: str,
    *,
    dim: int,
    dtype: torch.dtype | None = None,
    device: torch.device | None = None,
    contiguous: bool = True,
) -> None:
    """Shape-rank, dtype, device and contiguity checks that name the tensor."""
    if t.dim() != dim:
        raise ValueError(f"{name}: expected {dim} dims, got shape {tuple(t.shape)}")
    if dtype is not None and t.dtype != dtype:
        raise TypeError(f"{name}: expected dtype {dtype}, got {t.dtype}")
    if device is not None and t.device != device:
        raise ValueError(f"{name}: expected device {device}, got {t.device}")
    if contiguous and not t.is_contiguous():
        raise ValueError(f"{name}: must be contiguous (strides {t.stride()})")


def require_window(sliding_window: int | None) -> None:
    """The attention launchers' window: None (no window) or at least one token (0 means none to a kernel)."""
    if sliding_window is not None and sliding_window < 1:
        raise ValueError(f"sliding_window: expected None or >= 1, got {sliding_window}")


def bind(lib: ctypes.CDLL, symbol: str, argtypes: list) -> CFuncPtr:
    fn = getattr(lib, symbol)
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int
    return fn


def query(lib: ctypes.CDLL, symbol: str, family: str, device_index: int, *args: object) -> int:
    """The int a launcher's query (`symbol`: a split count, a stage count) writes through its first argument, asked
    with `device_index` current (the answer depends on the device's SMs and shared memory)."""
    out = ctypes.c_int(0)
    with torch.cuda.device(device_index):
        rc = getattr(lib, symbol)(ctypes.byref(out), *args)
    check(rc, symbol, lib, family)
    return out.value


def check(rc: int, what: str, lib: ctypes.CDLL, family: str) -> None:
    """Raise RuntimeError with the launcher's message when it returned a nonzero code."""
    if rc == 0:
        return
    get = getattr(lib, f"vt_{family}_last_error")
    get.restype = ctypes.c_char_p
    msg = (get() or b"").decode(errors="replace")
    raise RuntimeError(f"{what} failed (code {rc}): {msg}")
