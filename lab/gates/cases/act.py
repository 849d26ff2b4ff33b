"""Numerics cases for SiLU-and-mul (engine/cuda/act.cu) against engine.ops.act."""

from __future__ import annotations

from functools import partial

import torch

from engine.cuda import act
from engine.ops import act as ref
from lab.gates.cases import Inputs, KernelCase

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SHAPES = ((1, 3072), (7, 769), (33, 9728), (100, 25600), (3, 1))  # (rows, intermediate): decode, odd, Qwen3 sizes
SMALL = (7, 769)


def act_inputs(seed: int, device: torch.device, *, dtype: torch.dtype, rows: int, inter: int) -> Inputs:
    g = torch.Generator().manual_seed(seed)
    return {"x": (torch.randn(rows, 2 * inter, generator=g) * 4).to(dtype).to(device)}  # wide: exp's tails too


def run_act(x: Inputs) -> torch.Tensor:
    return act.silu_and_mul(x["x"])


def ref_act(x: Inputs) -> torch.Tensor:
    return ref.silu_and_mul(x["x"])


CASES = [
    KernelCase(
        f"act/silu_and_mul/{dt}/{rows}x{inter}",
        "silu_and_mul",
        "VT_ACT_KERNEL",
        dtype,
        partial(act_inputs, dtype=dtype, rows=rows, inter=inter),
        run_act,
        ref_act,
        "exact",
        "KERNEL-ACT",
        ("small",) if (rows, inter) == SMALL else (),
    )
    for dt, dtype in DTYPES.items()
    for rows, inter in SHAPES
]
