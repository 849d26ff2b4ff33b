"""The quantized formats' rows: dequantize (AWQ, GPTQ, NVFP4) and each format's linear (the fused dequant-GEMV
for one row, else dequant then the table's `linear`), and `quantized_linear`, a quantized layer's entry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from engine.cuda import quant as cuda_quant
from engine.flags import FlagSnapshot
from engine.kernels.table import KERNEL, Arm, Op, by_parts, cuda_op, gated_by, supports_any, weights_just_written
from engine.ops import quant


def _dequant_nvfp4_kernel(
    packed: torch.Tensor, block_scales: torch.Tensor, global_scale: torch.Tensor | float, dtype: torch.dtype
) -> torch.Tensor:
    gs = quant.nvfp4_global_scale(global_scale, packed.device)
    return cuda_quant.launch_dequant_nvfp4(packed, block_scales, gs, dtype)


dequant_awq = cuda_op(
    quant.dequant_awq,
    quant.check_dequant_awq,
    gated_by("VT_DEQUANT_KERNEL"),
    cuda_quant.launch_dequant_awq,
    cuda_quant.supports_dequant_awq,
    "qweight, qzeros and scales contiguous on one device; an fp32/bf16/fp16 output",
)
dequant_gptq = cuda_op(
    quant.dequant_gptq,
    quant.check_dequant_gptq,
    gated_by("VT_DEQUANT_KERNEL"),
    cuda_quant.launch_dequant_gptq,
    cuda_quant.supports_dequant_gptq,
    "4-bit weights; qweight, qzeros and scales contiguous on one device, g_idx there too; an fp32/bf16/fp16 output",
)
dequant_nvfp4 = cuda_op(
    quant.dequant_nvfp4,
    quant.check_dequant_nvfp4,
    gated_by("VT_DEQUANT_KERNEL"),
    _dequant_nvfp4_kernel,
    cuda_quant.supports_dequant_nvfp4,
    "packed and block_scales contiguous on one device",
)


def _quant_linear(
    reference: Any, check: Callable[..., None], supports: Callable[..., bool], needs: str, launch: Callable[..., Any]
) -> Op[..., torch.Tensor]:
    """A format's linear: the fused dequant-GEMV under VT_DEQUANT_GEMV where `supports` holds, else the table's
    dequant and linear ops, each with its own arms (the linear never a programmatic dependent of the dequant
    writing its W)."""
    dequant_then_linear = by_parts(reference.glue, under={"linear": weights_just_written})
    return Op(
        reference,
        check,
        [
            Arm("gemv", gated_by("VT_DEQUANT_GEMV"), supports, needs, launch),
            Arm("dequant_then_linear", gated_by(), supports_any, KERNEL, dequant_then_linear, composite=True),
        ],
    )


# what every fused dequant-GEMV needs past its op's check (engine/cuda/quant.py `supports_gemv`)
_GEMV_NEEDS = "one row of x; the checkpoint's tensors contiguous on x's device, a bias [N] of x's dtype there"
awq_linear = _quant_linear(
    quant.awq_linear,
    quant.check_awq_linear,
    cuda_quant.supports_awq_linear,
    _GEMV_NEEDS,
    cuda_quant.launch_awq_linear,
)
gptq_linear = _quant_linear(
    quant.gptq_linear,
    quant.check_gptq_linear,
    cuda_quant.supports_gptq_linear,
    f"4-bit weights, {_GEMV_NEEDS}, g_idx there too",
    cuda_quant.launch_gptq_linear,
)
nvfp4_linear = _quant_linear(
    quant.nvfp4_linear,
    quant.check_nvfp4_linear,
    cuda_quant.supports_nvfp4_linear,
    f"{_GEMV_NEEDS}; a global scale that is a float, or on x's device or the host",
    cuda_quant.launch_nvfp4_linear,
)


def quantized_linear(
    snapshot: FlagSnapshot,
    x: torch.Tensor,
    method: str,
    weights: dict[str, torch.Tensor],
    bias: torch.Tensor | None = None,
    group_size: int = 0,
    bits: int = 4,
    version: int = 1,
) -> torch.Tensor:  # x: [..., in_features] -> [..., out_features]
    """A quantized linear layer (engine/model/layers.py `QuantLinear`) as the table's `<method>_linear` op.

    `weights` are the layer's packed tensors under the engine's names. The op's arms decide: one row (M = 1)
    takes the fused dequant-GEMV under VT_DEQUANT_GEMV; more rows on CUDA dequantize (VT_DEQUANT_KERNEL)
    and then run the `linear` op; on the CPU the reference (engine/ops/quant.py) does both."""
    w = weights
    if method == "awq":
        return awq_linear(snapshot, x, w["qweight"], w["qzeros"], w["scales"], group_size, bias)
    if method == "gptq":
        return gptq_linear(snapshot, x, w["qweight"], w["qzeros"], w["scales"], w["g_idx"], bits, version, bias)
    if method == "nvfp4":
        return nvfp4_linear(snapshot, x, w["packed"], w["block_scales"], w["global_scale"], bias)
    raise ValueError(f"method: {method!r} is not a quantized linear (awq, gptq or nvfp4)")
