"""Numerics cases for neox RoPE and fused q/k norm + RoPE (engine/cuda/rope.cu) against engine.ops.rope/norm."""

from __future__ import annotations

from functools import partial

import torch

from engine.cuda import rope
from engine.ops import norm as ref_norm
from engine.ops import rope as ref_rope
from lab.gates.cases import Inputs, KernelCase

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SHAPES = ((1, 16, 128), (7, 8, 128), (33, 4, 256), (100, 16, 64), (5, 3, 18))  # (tokens, heads, head_dim)
EPS = 1e-6
THETA = 1_000_000.0
SMALL = (5, 3, 18)


def rope_inputs(
    seed: int, device: torch.device, *, dtype: torch.dtype, tokens: int, heads: int, head_dim: int
) -> Inputs:
    g = torch.Generator().manual_seed(seed)
    positions = torch.randint(0, 40_000, (tokens,), generator=g).to(device)
    cos, sin = ref_rope.rope_cos_sin(positions, head_dim, THETA, dtype)
    return {
        "x": (torch.randn(tokens, heads, head_dim, generator=g) * 2).to(dtype).to(device),
        "weight": (torch.rand(head_dim, generator=g) + 0.5).to(dtype).to(device),
        "cos": cos,
        "sin": sin,
    }


def run_rope(x: Inputs) -> torch.Tensor:
    return rope.apply_rope_neox(x["x"], x["cos"], x["sin"])


def ref_apply(x: Inputs) -> torch.Tensor:
    return ref_rope.apply_rope_neox(x["x"], x["cos"], x["sin"])


def run_fused(x: Inputs) -> torch.Tensor:
    return rope.qk_norm_rope(x["x"], x["weight"], x["cos"], x["sin"], EPS)


def ref_fused(x: Inputs) -> torch.Tensor:
    return ref_rope.apply_rope_neox(ref_norm.qk_norm(x["x"], x["weight"], EPS), x["cos"], x["sin"])


def build_cases() -> list[KernelCase]:
    cases = []
    arms = (
        ("neox", "VT_ROPE_KERNEL", run_rope, ref_apply, "exact"),
        ("qk_norm_neox", "VT_QK_NORM_ROPE_FUSED", run_fused, ref_fused, None),
    )
    for arm, flag, kernel, reference, tol in arms:
        for dt, dtype in DTYPES.items():
            for shape in SHAPES:
                make = partial(rope_inputs, dtype=dtype, tokens=shape[0], heads=shape[1], head_dim=shape[2])
                name = f"rope/{arm}/{dt}/t{shape[0]}/h{shape[1]}/d{shape[2]}"
                cases.append(
                    KernelCase(
                        name,
                        arm,
                        flag,
                        dtype,
                        make,
                        kernel,
                        reference,
                        tol or dt,
                        "KERNEL-ROPE",
                        ("small",) if shape == SMALL else (),
                    )
                )
    return cases


CASES = build_cases()
