"""The mixture of experts' rows: routing and the experts' GEMVs."""

from __future__ import annotations

from typing import Any

import torch

from engine.cuda import moe as cuda_moe
from engine.kernels.table import Arm, Op, cuda_op, gated_by
from engine.ops import moe


def supports_route(router_logits: torch.Tensor, top_k: int, *_: Any) -> bool:
    return cuda_moe.supports(router_logits.shape[1], top_k)


def supports_routed(
    x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor
) -> bool:
    return x.shape[0] <= moe.ROUTED_MAX_TOKENS


KERNEL_NEEDS = f"at most {cuda_moe.MAX_ROUTE_EXPERTS} experts, top_k at most {cuda_moe.MAX_TOP_K}"
moe_route = cuda_op(
    moe.moe_route, moe.check_moe_route, gated_by("VT_MOE_KERNELS"), cuda_moe.route, supports_route, KERNEL_NEEDS
)
# the routed arm is torch without a host read: at the default flags it is what a captured decode step runs
# (the reference groups tokens by expert on the host); past its reach (prefill) the reference runs
moe_experts = Op(
    moe.moe_experts,
    moe.check_moe_experts,
    [
        Arm(
            "cuda",
            gated_by("VT_MOE_KERNELS"),
            cuda_moe.supports_experts,
            f"{KERNEL_NEEDS}, contiguous expert weights and ids, every tensor on x's device",
            cuda_moe.launch_experts,
        ),
        Arm("routed", (), supports_routed, f"at most {moe.ROUTED_MAX_TOKENS} tokens", moe.moe_experts_routed),
    ],
)
