"""Qwen3-Next's gated delta net rows (engine/model/qwen3_next.py): its gates, convolution, gated norm and the
recurrence (the chunked prefill, on its reference: the chunked kernel lost its A/B and was retired, and the decode
step)."""

from __future__ import annotations

from engine.cuda import gdn as cuda_gdn
from engine.kernels.table import Op, cuda_op, gated_by
from engine.ops import gdn

gdn_gating = Op(gdn.gdn_gating, gdn.check_gdn_gating)
causal_conv1d = Op(gdn.causal_conv1d, gdn.check_causal_conv1d)
causal_conv1d_update = Op(gdn.causal_conv1d_update, gdn.check_causal_conv1d_update)
gated_rms_norm = Op(gdn.gated_rms_norm, gdn.check_gated_rms_norm)
gated_delta_chunked = Op(gdn.gated_delta_chunked, gdn.check_gated_delta_chunked)
gated_delta_decode = cuda_op(
    gdn.gated_delta_decode,
    gdn.check_gated_delta_decode,
    gated_by("VT_GDN_KERNEL"),
    cuda_gdn.launch_decode,
    cuda_gdn.supports_decode,
    f"one dtype for q/k/v, key dim at most {cuda_gdn.MAX_HEAD_DIM_K}, a contiguous state, one device",
)
