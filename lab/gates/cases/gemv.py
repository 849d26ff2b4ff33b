"""Numerics cases for the decode GEMV (engine/cuda/gemv.cu) against engine.ops.gemv (cuBLAS through F.linear)."""

from __future__ import annotations

from functools import partial

import torch

from engine.cuda import gemv
from engine.ops import gemv as ref
from lab.gates.cases import Inputs, KernelCase

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# (rows of x, out_features, in_features): Qwen3 projections; odd N with a last K chunk of one 16-byte load
# (4099 x 4104); K not a multiple of 8 (4101: the unaligned path); 3 rows padded to 4 past the split-K
# threshold; 8 rows whose x is read through L1 (64 KB of bf16); an odd N and K that miss the 16-byte path
SHAPES = (
    (1, 4096, 4096),
    (1, 12288, 4096),
    (1, 4096, 12288),
    (4, 769, 1024),
    (1, 83, 1001),
    (1, 151936, 1024),
    (1, 4099, 4104),
    (1, 4099, 4101),
    (3, 9001, 264),
    (8, 1001, 4096),
)
SMALL = (4, 769, 1024)


def gemv_inputs(seed: int, device: torch.device, *, dtype: torch.dtype, m: int, n: int, k: int, bias: bool) -> Inputs:
    g = torch.Generator().manual_seed(seed)
    return {
        "x": torch.randn(m, k, generator=g).to(dtype).to(device),
        "weight": (torch.randn(n, k, generator=g) / k**0.5).to(dtype).to(device),
        "bias": torch.randn(n, generator=g).to(dtype).to(device) if bias else None,
    }


def run_gemv(x: Inputs) -> torch.Tensor:
    return gemv.linear(x["x"], x["weight"], x["bias"])


def ref_linear(x: Inputs) -> torch.Tensor:
    return ref.linear(x["x"], x["weight"], x["bias"])


CASES = [
    KernelCase(
        f"gemv/linear/{dt}/m{m}/n{n}/k{k}" + ("/bias" if bias else ""),
        "gemv",
        "VT_GEMV",
        dtype,
        partial(gemv_inputs, dtype=dtype, m=m, n=n, k=k, bias=bias),
        run_gemv,
        ref_linear,
        dt,
        "KERNEL-GEMV",
        ("small",) if (m, n, k) == SMALL and not bias else (),
    )
    for dt, dtype in DTYPES.items()
    for m, n, k in SHAPES
    for bias in ((False, True) if n == 769 else (False,))
]
