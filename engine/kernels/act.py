"""The activations' rows: SiLU-and-multiply, and Qwen3-Next's sigmoid gate."""

from __future__ import annotations

from engine.cuda import act as cuda_act
from engine.kernels.table import Op, cuda_op, gated_by
from engine.ops import act

silu_and_mul = cuda_op(act.silu_and_mul, act.check_silu_and_mul, gated_by("VT_ACT_KERNEL"), cuda_act.silu_and_mul)
# Qwen3-Next's (engine/model/qwen3_next.py)
sigmoid_gate = Op(act.sigmoid_gate, act.check_sigmoid_gate)
