"""Rotary embedding's rows: RoPE alone, after the q/k norm, and the decode step's q/k/v norm-RoPE-store."""

from __future__ import annotations

from engine.cuda import rope as cuda_rope
from engine.kernels.table import KERNEL, Arm, Op, by_parts, cuda_op, gated_by, supports_any
from engine.ops import rope

# Each tensor is checked once a call: the op's check, the arm's `supports` (what the kernel needs past it: an even
# head_dim, one device), then the binding's launch, which checks nothing again.
_NEEDS = "an even head_dim, every tensor on x's device"
apply_rope_neox = cuda_op(
    rope.apply_rope_neox,
    rope.check_apply_rope_neox,
    gated_by("VT_ROPE_KERNEL"),
    cuda_rope.launch_apply_rope_neox,
    cuda_rope.supports,
    _NEEDS,
)
qk_norm_rope = Op(
    rope.qk_norm_rope,
    rope.check_qk_norm_rope,
    [
        Arm(
            "fused",
            gated_by("VT_QK_NORM_ROPE_FUSED"),
            cuda_rope.supports_norm,
            f"{_NEEDS}, a contiguous weight",
            cuda_rope.launch_qk_norm_rope,
        ),
        Arm("norm_then_rope", gated_by(), supports_any, KERNEL, by_parts(rope.qk_norm_rope.glue), composite=True),
    ],
)


qkv_norm_rope_store = Op(
    rope.qkv_norm_rope_store,
    rope.check_qkv_norm_rope_store,
    [
        Arm(
            "fused",
            gated_by("VT_QKV_ROPE_STORE"),
            cuda_rope.supports_store,
            f"an even head_dim at most {cuda_rope.MAX_FUSED_HEAD_DIM}, contiguous last dims, one device",
            cuda_rope.launch_qkv_norm_rope_store,
        ),
        Arm("separate", gated_by(), supports_any, KERNEL, by_parts(rope.qkv_norm_rope_store.glue), composite=True),
    ],
)
