"""Numerics cases for the serving sampler's fused draw (engine/cuda/sample_rows.cu) against engine.ops.sample.

The kernel recomputes the reference's noise with the same integer hash and the same fp32 operations, so the
drawn token must be the reference's exactly: indices compared bitwise as fp32 (exact below 2**24). Rows mix
temperatures (0 included: its draw uses temperature 1, as the reference's), seeds at the int64 extremes and
steps past 2**32; logits rows are strided (a wider buffer's first `vocab` columns).
"""

from __future__ import annotations

from functools import partial

import torch

from engine import kernels
from engine.ops import sample as ref
from lab.gates.cases import Inputs, KernelCase

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
VOCABS = (7, 2049, 32_000, 151_936)
TEMPERATURES = (0.0, 0.6, 1.0, 1.3, 0.05, 2.0, 0.6)
SEEDS = (0, 1, -1, 2**63 - 1, -(2**63), 123456789, 42)
STEPS = (0, 1, 5, 2**32 + 3, 1023, 7, 0)


def draw_inputs(seed: int, device: torch.device, *, dtype: torch.dtype, vocab: int) -> Inputs:
    g = torch.Generator().manual_seed(seed)
    rows = len(TEMPERATURES)
    wide = (torch.randn(rows, vocab + 5, generator=g) * 3).to(dtype).to(device)
    return {
        "logits": wide[:, :vocab],
        "temperature": torch.tensor(TEMPERATURES, dtype=torch.float32, device=device),
        "top_k": torch.full((rows,), -1, dtype=torch.int64, device=device),
        "top_p": torch.ones(rows, dtype=torch.float32, device=device),
        "seeds": torch.tensor(SEEDS, dtype=torch.int64, device=device),
        "steps": torch.tensor(STEPS, dtype=torch.int64, device=device),
    }


def _args(x: Inputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return x["logits"], x["temperature"], x["top_k"], x["top_p"], x["seeds"], x["steps"]


def run_gumbel(x: Inputs) -> torch.Tensor:
    return kernels.sample_rows.run_arm("gumbel", *_args(x), False).float()


def ref_draw(x: Inputs) -> torch.Tensor:
    return ref.sample_rows(*_args(x), False).float()


CASES = [
    KernelCase(
        f"sample_rows/gumbel/{dt}/v{vocab}",
        "gumbel",
        "VT_SAMPLE_ROWS_KERNEL",
        dtype,
        partial(draw_inputs, dtype=dtype, vocab=vocab),
        run_gumbel,
        ref_draw,
        "exact",
        "ENGINE-SERVE",
        ("small",) if vocab == 2049 and dt == "bf16" else (),
    )
    for dt, dtype in DTYPES.items()
    for vocab in VOCABS
]
