"""Rotary embedding's rows: RoPE alone, after the q/k norm, and the decode step's q/k/v norm-RoPE-store."""

from __future__ import annotations

from typing import Any

import torch

from engine.cuda import rope as cuda_rope
from engine.kernels.table import KERNEL, Arm, Op, by_parts, cuda_op, gated_by, supports_any
from engine.ops import rope

apply_rope_neox = cuda_op(
    rope.apply_rope_neox, rope.check_apply_rope_neox, gated_by("VT_ROPE_KERNEL"), cuda_rope.apply_rope_neox
)
qk_norm_rope = Op(
    rope.qk_norm_rope,
    rope.check_qk_norm_rope,
    [
        Arm("fused", gated_by("VT_QK_NORM_ROPE_FUSED"), supports_any, KERNEL, cuda_rope.qk_norm_rope),
        Arm("norm_then_rope", gated_by(), supports_any, KERNEL, by_parts(rope.qk_norm_rope.glue), composite=True),
    ],
)


def supports_fused_store(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *_: Any, **__: Any) -> bool:
    return q.shape[-1] <= cuda_rope.MAX_FUSED_HEAD_DIM and all(t.stride(-1) == 1 for t in (q, k, v))


qkv_norm_rope_store = Op(
    rope.qkv_norm_rope_store,
    rope.check_qkv_norm_rope_store,
    [
        Arm(
            "fused",
            gated_by("VT_QKV_ROPE_STORE"),
            supports_fused_store,
            f"head_dim at most {cuda_rope.MAX_FUSED_HEAD_DIM}, contiguous last dims",
            cuda_rope.qkv_norm_rope_store,
        ),
        Arm("separate", gated_by(), supports_any, KERNEL, by_parts(rope.qkv_norm_rope_store.glue), composite=True),
    ],
)
