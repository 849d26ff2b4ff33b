"""Numerics cases for RMSNorm and fused add+RMSNorm (engine/cuda/norm.cu) against engine.ops.norm."""

from __future__ import annotations

from functools import partial

import torch

from engine.cuda import norm
from engine.ops import norm as ref
from lab.gates.cases import Inputs, KernelCase

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SHAPES = ((1, 4096), (7, 769), (33, 2560), (100, 5120), (3, 111))  # (rows, hidden): decode, odd, Qwen3 sizes
EPS = 1e-6
SMALL = (7, 769)


def norm_inputs(seed: int, device: torch.device, *, dtype: torch.dtype, rows: int, hidden: int) -> Inputs:
    g = torch.Generator().manual_seed(seed)
    return {
        "x": (torch.randn(rows, hidden, generator=g) * 2).to(dtype).to(device),
        "residual": torch.randn(rows, hidden, generator=g).to(dtype).to(device),
        "weight": (torch.rand(hidden, generator=g) + 0.5).to(dtype).to(device),
    }


def run_rms(x: Inputs) -> torch.Tensor:
    return norm.rms_norm(x["x"], x["weight"], EPS)


def ref_rms(x: Inputs) -> torch.Tensor:
    return ref.rms_norm(x["x"], x["weight"], EPS)


def run_fused(x: Inputs) -> torch.Tensor:  # [2, rows, hidden]: the normed output, then the new residual
    return torch.stack(norm.fused_add_rms_norm(x["x"], x["residual"], x["weight"], EPS))


def ref_fused(x: Inputs) -> torch.Tensor:
    return torch.stack(ref.fused_add_rms_norm(x["x"], x["residual"], x["weight"], EPS))


def build_cases() -> list[KernelCase]:
    cases = []
    for arm, kernel, reference in (("rms", run_rms, ref_rms), ("fused_add_rms", run_fused, ref_fused)):
        for dt, dtype in DTYPES.items():
            for rows, hidden in SHAPES:
                make = partial(norm_inputs, dtype=dtype, rows=rows, hidden=hidden)
                cases.append(
                    KernelCase(
                        f"norm/{arm}/{dt}/{rows}x{hidden}",
                        arm,
                        "VT_NORM_KERNEL",
                        dtype,
                        make,
                        kernel,
                        reference,
                        dt,
                        "KERNEL-NORM",
                        ("small",) if (rows, hidden) == SMALL else (),
                    )
                )
    return cases


CASES = build_cases()
