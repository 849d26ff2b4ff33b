"""The norms' rows: RMSNorm (alone, after a residual add, per q/k head) and Qwen3-Next's offset RMSNorm."""

from __future__ import annotations

from engine.cuda import norm as cuda_norm
from engine.kernels.table import Op, cuda_op, gated_by
from engine.ops import norm

rms_norm = cuda_op(norm.rms_norm, norm.check_rms_norm, gated_by("VT_NORM_KERNEL"), cuda_norm.rms_norm)
fused_add_rms_norm = cuda_op(
    norm.fused_add_rms_norm, norm.check_fused_add_rms_norm, gated_by("VT_NORM_KERNEL"), cuda_norm.fused_add_rms_norm
)
qk_norm = cuda_op(norm.qk_norm, norm.check_qk_norm, gated_by("VT_NORM_KERNEL"), cuda_norm.rms_norm)
# Qwen3-Next's (engine/model/qwen3_next.py)
rms_norm_offset = Op(norm.rms_norm_offset, norm.check_rms_norm_offset)
