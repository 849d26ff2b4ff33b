"""Greedy argmax and seeded top-k/top-p sampling over logits (row KERNEL-SAMPLE)."""
from __future__ import annotations

import torch

from engine.ops._check import FLOAT_DTYPES, check_tensor


def greedy_argmax(logits: torch.Tensor) -> torch.Tensor:  # logits: [batch, vocab] -> [batch] int64
    """Index of each row's maximum, with torch.argmax's rules.

    Ties: the lowest index wins. NaN: a NaN counts as larger than every number,
    so a row holding NaN returns its first NaN. No rounding (a pure selection).
    """
    check_tensor(logits, "logits", ndim=2, dtypes=FLOAT_DTYPES)
    if logits.shape[1] == 0:
        raise ValueError("logits: vocab dim is empty")
    return torch.argmax(logits, dim=-1)
