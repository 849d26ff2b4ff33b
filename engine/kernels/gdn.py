"""Qwen3-Next's gated delta net rows (engine/model/qwen3_next.py): its gates, convolution, gated norm and the
recurrence (the chunked prefill, on its reference: the chunked kernel lost its A/B and was retired, and the decode
step)."""

from __future__ import annotations

from typing import Any

import torch

from engine.cuda import gdn as cuda_gdn
from engine.kernels.table import Op, cuda_op, gated_by
from engine.ops import gdn


def supports_decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    **_: Any,
) -> bool:
    return cuda_gdn.supports(q, k, v) and state.is_contiguous()


gdn_gating = Op(gdn.gdn_gating, gdn.check_gdn_gating)
causal_conv1d = Op(gdn.causal_conv1d, gdn.check_causal_conv1d)
causal_conv1d_update = Op(gdn.causal_conv1d_update, gdn.check_causal_conv1d_update)
gated_rms_norm = Op(gdn.gated_rms_norm, gdn.check_gated_rms_norm)
gated_delta_chunked = Op(gdn.gated_delta_chunked, gdn.check_gated_delta_chunked)
gated_delta_decode = cuda_op(
    gdn.gated_delta_decode,
    gdn.check_gated_delta_decode,
    gated_by("VT_GDN_KERNEL"),
    cuda_gdn.decode,
    supports_decode,
    f"one dtype for q/k/v, key dim at most {cuda_gdn.MAX_HEAD_DIM_K}, a contiguous state",
)
