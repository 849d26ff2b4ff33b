"""Dtype-faithful linear and embedding lookup: the reference for the decode GEMV (row KERNEL-GEMV)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from engine import flags
from engine.cuda import gemv
from engine.ops._check import (FLOAT_DTYPES, INDEX_DTYPES, check_dim, check_same_dtype, check_tensor,
                               values_checkable)


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
    if takes_gemv(x, weight):
        return gemv.linear(x, weight, bias)
    return F.linear(x, weight, bias)


def takes_gemv(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Decode rows (at most gemv.MAX_ROWS) on a GPU under VT_GEMV take the GEMV, which streams W by rows; a
    prefill, or a transposed W (dequant-then-linear's W.T), keeps the GEMM, which reads it in place."""
    return (x.is_cuda and flags.enabled("VT_GEMV") and flags.enabled("VT_KERNELS")
            and x.numel() <= gemv.MAX_ROWS * x.shape[-1] and weight.stride(-1) == 1)


def embedding(
    ids: torch.Tensor,  # ids: [...] int32/int64
    weight: torch.Tensor,  # weight: [vocab, hidden]
) -> torch.Tensor:  # [..., hidden], weight.dtype
    """Row lookup `weight[ids]`; exact (no rounding). Ids outside [0, vocab) are an error."""
    check_tensor(ids, "ids", dtypes=INDEX_DTYPES)
    check_tensor(weight, "weight", ndim=2, dtypes=FLOAT_DTYPES)
    if ids.numel() > 0 and values_checkable(ids):
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= weight.shape[0]:
            raise IndexError(f"ids: values span [{lo}, {hi}] outside the vocab [0, {weight.shape[0]})")
    return weight[ids.long()]


def quantized_linear(
    x: torch.Tensor,  # x: [..., in_features]
    method: str,  # "awq" | "gptq" | "nvfp4"
    weights: dict[str, torch.Tensor],  # the layer's packed tensors under the engine's names
    bias: torch.Tensor | None = None,  # bias: [out_features], x.dtype
    group_size: int = 0,
    bits: int = 4,
    version: int = 1,
) -> torch.Tensor:  # [..., out_features], x.dtype
    """The one dispatch of a quantized linear layer. On a GPU one row (M = 1) takes the fused dequant-GEMV
    under VT_DEQUANT_GEMV; more rows dequantize (the dequant kernel under VT_DEQUANT_KERNEL) and then run the
    GEMM; on the CPU the torch references (engine/ops/awq.py, gptq.py, nvfp4.py) do both."""
    from engine.ops import awq, gptq, nvfp4  # they build on `linear` above

    w = weights
    if method == "awq":
        return awq.awq_linear(x, w["qweight"], w["qzeros"], w["scales"], group_size, bias)
    if method == "gptq":
        return gptq.gptq_linear(x, w["qweight"], w["qzeros"], w["scales"], w["g_idx"], bits, version, bias)
    if method == "nvfp4":
        return nvfp4.nvfp4_linear(x, w["packed"], w["block_scales"], w["global_scale"], bias)
    raise ValueError(f"method: {method!r} is not a quantized linear (awq, gptq or nvfp4)")
