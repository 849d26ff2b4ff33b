"""Dtype-faithful linear and embedding lookup: the references of the decode GEMV family (row KERNEL-GEMV).

Each op has its reference and, beside it, its entry check (`check_<op>`), which the kernel table
(engine/kernels.py) runs once before it picks an arm.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.ops._check import FLOAT_DTYPES, INDEX_DTYPES, check_dim, check_same_dtype, check_tensor, values_checkable


def linear(
    x: torch.Tensor,  # x: [..., in_features]
    weight: torch.Tensor,  # weight: [out_features, in_features]
    bias: torch.Tensor | None = None,  # bias: [out_features]
) -> torch.Tensor:  # [..., out_features], x.dtype
    """`x @ weight.T (+ bias)` in x's dtype, exactly as `nn.Linear` in Hugging Face models.

    Rounding: one rounding to x.dtype at the output (torch accumulates a bf16/fp16
    GEMM in fp32 and rounds once; the bias is added by the same call, as
    `nn.Linear` does). The operands are never upcast to float32 and the output
    is never float32 for a half-precision input: a fast GEMV writes x.dtype.
    """
    return F.linear(x, weight, bias)


def check_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
    check_tensor(x, "x", dtypes=FLOAT_DTYPES)
    if x.dim() < 1:
        raise ValueError("x: expected at least 1 dim, got a scalar")
    check_tensor(weight, "weight", ndim=2)
    check_same_dtype(weight, "weight", x, "x")
    check_dim(weight, "weight", 1, x.shape[-1], "x's last dim (in_features)")
    if bias is not None:
        check_tensor(bias, "bias", ndim=1)
        check_same_dtype(bias, "bias", x, "x")
        check_dim(bias, "bias", 0, weight.shape[0], "weight's out_features")


def embedding(
    ids: torch.Tensor,  # ids: [...] int32/int64
    weight: torch.Tensor,  # weight: [vocab, hidden]
) -> torch.Tensor:  # [..., hidden], weight.dtype
    """Row lookup `weight[ids]`; exact (no rounding). Ids outside [0, vocab) are an error."""
    return weight[ids.long()]


def check_embedding(ids: torch.Tensor, weight: torch.Tensor) -> None:
    check_tensor(ids, "ids", dtypes=INDEX_DTYPES)
    check_tensor(weight, "weight", ndim=2, dtypes=FLOAT_DTYPES)
    if ids.numel() > 0 and values_checkable(ids):
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= weight.shape[0]:
            raise IndexError(f"ids: values span [{lo}, {hi}] outside the vocab [0, {weight.shape[0]})")
