"""The L2 prefetch's reference: nothing, since asking L2 for bytes changes no value (row ENGINE-PERSISTENT)."""

from __future__ import annotations

import torch

from engine.ops._check import check_tensor


def l2_prefetch(*tensors: torch.Tensor) -> None:  # tensors: any shapes and dtypes, read by a later kernel
    """A hint to the memory system that `tensors` will be read soon: no value to compute, so nothing to do here."""


def check_l2_prefetch(*tensors: torch.Tensor) -> None:
    if not tensors:
        raise ValueError("tensors: expected at least one tensor to prefetch, got none")
    for i, t in enumerate(tensors):
        check_tensor(t, f"tensors[{i}]")
