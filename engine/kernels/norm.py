"""The norms' rows: RMSNorm (alone, after a residual add, per q/k head) and Qwen3-Next's offset RMSNorm."""

from __future__ import annotations

from engine.cuda import norm as cuda_norm
from engine.kernels.table import Op, cuda_op, gated_by
from engine.ops import norm

# Each tensor is checked once a call: the op's check (ranks, dtypes, sizes), the arm's `supports` (what the kernel
# needs past it: a contiguous weight, one device), then the binding's launch, which checks nothing again.
_NORM = gated_by("VT_NORM_KERNEL")
_NEEDS = "a contiguous weight and every tensor on x's device"
rms_norm = cuda_op(norm.rms_norm, norm.check_rms_norm, _NORM, cuda_norm.launch_rms_norm, cuda_norm.supports, _NEEDS)
fused_add_rms_norm = cuda_op(
    norm.fused_add_rms_norm,
    norm.check_fused_add_rms_norm,
    _NORM,
    cuda_norm.launch_fused_add_rms_norm,
    cuda_norm.supports_add,
    _NEEDS,
)
qk_norm = cuda_op(norm.qk_norm, norm.check_qk_norm, _NORM, cuda_norm.launch_rms_norm, cuda_norm.supports, _NEEDS)
# Qwen3-Next's (engine/model/qwen3_next.py)
rms_norm_offset = Op(norm.rms_norm_offset, norm.check_rms_norm_offset)
