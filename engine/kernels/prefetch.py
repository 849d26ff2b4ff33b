"""The L2 prefetch's row: a decode layer asks L2 for the weights it reads after its attention (VT_L2_PREFETCH)."""

from __future__ import annotations

from engine.cuda import prefetch as cuda_prefetch
from engine.kernels.table import Arm, Op, gated_by
from engine.ops import prefetch

# the reference does nothing (a prefetch changes no value); the arm is sm_90's bulk prefetch
l2_prefetch = Op(
    prefetch.l2_prefetch,
    prefetch.check_l2_prefetch,
    [
        Arm(
            "cuda",
            gated_by("VT_L2_PREFETCH"),
            cuda_prefetch.supports,
            cuda_prefetch.NEEDS,
            cuda_prefetch.l2_prefetch,
            capability=cuda_prefetch.CAPABILITY,
        )
    ],
)
