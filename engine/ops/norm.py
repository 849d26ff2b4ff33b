"""RMSNorm, fused residual-add + RMSNorm and Qwen3's per-head q/k norm (row KERNEL-NORM)."""

from __future__ import annotations

import torch

from engine.ops._check import FLOAT_DTYPES, check_dim, check_same_dtype, check_tensor


def rms_norm(
    x: torch.Tensor,  # x: [..., hidden]
    weight: torch.Tensor,  # weight: [hidden], x.dtype
    eps: float,
) -> torch.Tensor:  # [..., hidden], x.dtype
    """`weight * (x / sqrt(mean(x^2) + eps))`, rounded as Hugging Face's Qwen3RMSNorm.

    Rounding points:
    1. x is upcast to fp32; mean of squares, `rsqrt(var + eps)` and the product
       `x * rsqrt(...)` are fp32.
    2. The normalised value is rounded to x.dtype.
    3. Then multiplied by the weight in x.dtype (one more rounding).
    A fast kernel must round at 2 before the weight multiply, not after it.
    """
    xf = x.to(torch.float32)
    # In place on the fresh statistics: the same kernels and values as `rsqrt(variance + eps)`, two allocations fewer.
    inv = xf.pow(2).mean(-1, keepdim=True).add_(eps).rsqrt_()
    return weight * (xf * inv).to(x.dtype)


def check_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    check_tensor(x, "x", dtypes=FLOAT_DTYPES)
    if x.dim() < 1:
        raise ValueError("x: expected at least 1 dim, got a scalar")
    check_tensor(weight, "weight", ndim=1)
    check_same_dtype(weight, "weight", x, "x")
    check_dim(weight, "weight", 0, x.shape[-1], "x's last dim (hidden)")


def fused_add_rms_norm(
    x: torch.Tensor,  # x: [..., hidden], the sublayer output
    residual: torch.Tensor,  # residual: [..., hidden], x.dtype
    weight: torch.Tensor,  # weight: [hidden], x.dtype
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:  # (normed, new_residual), both [..., hidden], x.dtype
    """`new_residual = x + residual`; `normed = rms_norm(new_residual)`.

    Rounding: the sum is rounded to x.dtype BEFORE it is normalised (Hugging Face
    writes `hidden_states = residual + hidden_states` in the model dtype and the
    next RMSNorm reads that), then `rms_norm`'s rounding points apply.
    """
    new_residual = x + residual
    return rms_norm(new_residual, weight, eps), new_residual


def check_fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    check_tensor(x, "x", dtypes=FLOAT_DTYPES)
    check_tensor(residual, "residual")
    check_same_dtype(residual, "residual", x, "x")
    if residual.shape != x.shape:
        raise ValueError(f"residual: shape {tuple(residual.shape)} != x's {tuple(x.shape)}")
    check_rms_norm(x, weight, eps)


def qk_norm(
    x: torch.Tensor,  # x: [tokens, heads, head_dim]
    weight: torch.Tensor,  # weight: [head_dim], x.dtype
    eps: float,
) -> torch.Tensor:  # [tokens, heads, head_dim], x.dtype
    """Qwen3's q_norm/k_norm: RMSNorm over head_dim of every head, applied before RoPE.

    Same rounding points as `rms_norm` (fp32 statistics, round, then weight multiply).
    """
    return rms_norm(x, weight, eps)


def check_qk_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    check_tensor(x, "x", ndim=3, dtypes=FLOAT_DTYPES)
    check_rms_norm(x, weight, eps)


def rms_norm_offset(
    x: torch.Tensor,  # x: [..., hidden]
    weight: torch.Tensor,  # weight: [hidden], zero-centred (the scale is 1 + weight)
    eps: float,
) -> torch.Tensor:  # [..., hidden], x.dtype
    """`(1 + weight) * (x / sqrt(mean(x^2) + eps))`, rounded as Hugging Face's Qwen3NextRMSNorm.

    Rounding: x upcast to fp32; the statistics, the normalised value and its product with
    `1 + weight` (the weight upcast to fp32 first) are fp32; one rounding to x.dtype at the end. Unlike
    `rms_norm`, nothing rounds before the weight multiply.
    """
    xf = x.to(torch.float32)
    normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (normed * (1.0 + weight.to(torch.float32))).to(x.dtype)


def check_rms_norm_offset(x: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    check_rms_norm(x, weight, eps)
