"""Entry checks shared by the reference ops: each error names the tensor and what was expected."""

from __future__ import annotations

from collections.abc import Iterable

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
INDEX_DTYPES = (torch.int32, torch.int64)


def check_tensor(
    t: object,
    name: str,
    ndim: int | None = None,
    dtypes: Iterable[torch.dtype] | None = None,
) -> torch.Tensor:
    """Return `t` if it is a tensor of rank `ndim` with a dtype in `dtypes`; raise naming `name`."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dims, got shape {tuple(t.shape)}")
    if dtypes is not None:
        allowed = tuple(dtypes)
        if t.dtype not in allowed:
            names = ", ".join(str(d).removeprefix("torch.") for d in allowed)
            raise TypeError(f"{name}: dtype {str(t.dtype).removeprefix('torch.')} not in ({names})")
    return t


def check_dim(t: torch.Tensor, name: str, dim: int, size: int, what: str) -> None:
    """Raise unless `t.shape[dim] == size`; `what` says where `size` comes from."""
    if t.shape[dim] != size:
        raise ValueError(f"{name}: dim {dim} is {t.shape[dim]} but {what} is {size} (shape {tuple(t.shape)})")


def check_same_dtype(t: torch.Tensor, name: str, ref: torch.Tensor, ref_name: str) -> None:
    if t.dtype != ref.dtype:
        raise TypeError(
            f"{name}: dtype {str(t.dtype).removeprefix('torch.')} differs from "
            f"{ref_name}'s {str(ref.dtype).removeprefix('torch.')}"
        )


def values_checkable(t: torch.Tensor) -> bool:
    """Whether a check may read `t`'s values on the host: not while a CUDA graph is being captured,
    where a host read is an illegal synchronisation that poisons the capture. Captured steps are
    first run eagerly (the runner's warm-up), so the values were checked once already."""
    return not (t.is_cuda and torch.cuda.is_current_stream_capturing())


def refuse_capture(t: torch.Tensor, op: str, fix: str) -> None:
    """Raise before a reference that must read values on the host runs inside a CUDA graph capture:
    the runner catches the error and stays eager, instead of a poisoned capture."""
    if not values_checkable(t):
        raise RuntimeError(f"{op}: the torch reference reads values on the host and cannot be captured; {fix}")
