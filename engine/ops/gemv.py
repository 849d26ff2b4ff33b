"""Dtype-faithful linear and embedding lookup: the references of the decode GEMV family (row KERNEL-GEMV), and the
linear with the op before it (a pre-norm, the gated activation) that the prologue GEMVs fold in (row ENGINE-PERF).

Each op has its reference and, beside it, its entry check (`check_<op>`), which the kernel table
(engine/kernels/) runs once before it picks an arm.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from engine.ops._check import FLOAT_DTYPES, INDEX_DTYPES, check_dim, check_same_dtype, check_tensor, values_checkable
from engine.ops._compose import composite
from engine.ops.act import check_silu_and_mul
from engine.ops.norm import check_fused_add_rms_norm, check_rms_norm


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


@composite
def add_rms_norm_linear(
    parts: Any,  # the ops it runs, by name: the references (_compose.references) or the kernel table's
    x: torch.Tensor,  # x: [..., hidden], the sublayer output (the embedding before the first layer)
    residual: torch.Tensor | None,  # residual: [..., hidden], the running sum; None before the first layer
    norm_weight: torch.Tensor,  # norm_weight: [hidden], x.dtype
    eps: float,
    weight: torch.Tensor,  # weight: [out_features, hidden], x.dtype
    bias: torch.Tensor | None = None,  # bias: [out_features]
) -> tuple[torch.Tensor, torch.Tensor]:  # (y [..., out_features], new_residual [..., hidden]), x.dtype
    """A decoder layer's pre-norm and the projection after it: `linear(rms_norm(x + residual))`.

    `fused_add_rms_norm`'s rounding points (the sum rounded to x.dtype, then `rms_norm`'s), then `linear`'s
    one rounding. With no residual the norm is of x alone and the new residual is x itself.
    """
    normed, new_residual = pre_norm(parts, x, residual, norm_weight, eps)
    return parts.linear(normed, weight, bias), new_residual


def pre_norm(
    parts: Any,  # rms_norm and fused_add_rms_norm by name: the references, the kernel table's, or kernel bindings
    x: torch.Tensor,  # x: [..., hidden]
    residual: torch.Tensor | None,  # residual: [..., hidden] or None
    norm_weight: torch.Tensor,  # norm_weight: [hidden]
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:  # (normed, new_residual), x.dtype
    """`fused_add_rms_norm(x, residual)`, or with no residual `rms_norm(x)` and x itself as the new residual."""
    if residual is None:
        return parts.rms_norm(x, norm_weight, eps), x
    return parts.fused_add_rms_norm(x, residual, norm_weight, eps)


def check_add_rms_norm_linear(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    norm_weight: torch.Tensor,
    eps: float,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> None:
    if residual is None:
        check_rms_norm(x, norm_weight, eps)
    else:
        check_fused_add_rms_norm(x, residual, norm_weight, eps)
    check_linear(x, weight, bias)


@composite
def silu_mul_linear(
    parts: Any,  # as add_rms_norm_linear's
    gate_up: torch.Tensor,  # gate_up: [..., 2 * intermediate] (gate first)
    weight: torch.Tensor,  # weight: [out_features, intermediate], gate_up.dtype
    bias: torch.Tensor | None = None,  # bias: [out_features]
) -> torch.Tensor:  # [..., out_features], gate_up.dtype
    """The gated MLP's down projection of its activation: `linear(silu_and_mul(gate_up))`, both ops' roundings."""
    return parts.linear(parts.silu_and_mul(gate_up), weight, bias)


def check_silu_mul_linear(gate_up: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
    check_silu_and_mul(gate_up)
    check_tensor(weight, "weight", ndim=2)
    check_same_dtype(weight, "weight", gate_up, "gate_up")
    check_dim(weight, "weight", 1, gate_up.shape[-1] // 2, "gate_up's intermediate size (last dim / 2)")
    if bias is not None:
        check_tensor(bias, "bias", ndim=1)
        check_same_dtype(bias, "bias", gate_up, "gate_up")
        check_dim(bias, "bias", 0, weight.shape[0], "weight's out_features")


@composite
def linear_silu_mul(
    parts: Any,  # as add_rms_norm_linear's
    x: torch.Tensor,  # x: [..., hidden]
    weight: torch.Tensor,  # weight: [2 * inter, hidden], gate rows then up rows
    bias: torch.Tensor | None = None,  # bias: [2 * inter]
) -> torch.Tensor:  # [..., inter], x.dtype
    """The gated MLP's gate/up projection and its activation: `silu_and_mul(linear(x))`, both ops' roundings."""
    return parts.silu_and_mul(parts.linear(x, weight, bias))


def check_linear_silu_mul(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
    check_linear(x, weight, bias)
    if weight.shape[0] % 2:
        raise ValueError(f"weight: {weight.shape[0]} rows are not gate and up halves (an even count)")


@composite
def add_rms_norm_linear_silu_mul(
    parts: Any,  # as add_rms_norm_linear's
    x: torch.Tensor,  # x: [..., hidden], the attention output
    residual: torch.Tensor | None,  # residual: [..., hidden]
    norm_weight: torch.Tensor,  # norm_weight: [hidden]
    eps: float,
    weight: torch.Tensor,  # weight: [2 * inter, hidden], gate rows then up rows
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:  # (silu(gate) * up [..., inter], new_residual [..., hidden])
    """The MLP's pre-norm, gate/up projection and activation: `add_rms_norm_linear` then `silu_and_mul`."""
    y, new_residual = parts.add_rms_norm_linear(x, residual, norm_weight, eps, weight, bias)
    return parts.silu_and_mul(y), new_residual


def check_add_rms_norm_linear_silu_mul(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    norm_weight: torch.Tensor,
    eps: float,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> None:
    check_add_rms_norm_linear(x, residual, norm_weight, eps, weight, bias)
    check_linear_silu_mul(x, weight, bias)
