"""Numerics cases for the small decode GEMM (row ENGINE-PERSISTENT; gemm_small.cuh): 2 to 32 rows, plain and with
the residual add + RMSNorm prologue, after a layer and first. Each is held to the torch reference (today's chain:
`rms_norm`, then `F.linear`) within its dtype's tolerance: its fp32 sums are mma tiles added in warp order, not
cuBLAS's. The prologue forms are also bit for bit the norm kernel followed by the plain small GEMM ("/exact")."""

from __future__ import annotations

from functools import partial

import torch

from engine.cuda import gemm_small, norm
from engine.ops import gemv as ref_gemv
from lab.gates.cases import Inputs, KernelCase
from lab.gates.cases.decode_fused import EPS, norm_args, norm_inputs, ref_linear, ref_norm_gemv

ROW = "ENGINE-PERSISTENT"
FLAG = "VT_GEMM_SMALL"
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# (rows, out_features, in_features): Qwen3-0.6B's b32 projections (q/k/v, o, gate/up, down) at the ends of the row
# range, then odd shapes: a 7-column tail with K 1000 (31 chunks and a part), 3 columns past an n8 tile with K 264;
# then one m16 tile: b8's q/k/v, o and down, b2's gate/up, and 5 rows of the odd shape
PLAIN_SHAPES = (
    (32, 4096, 1024),
    (32, 1024, 2048),
    (32, 6144, 1024),
    (32, 1024, 3072),
    (9, 4096, 1024),
    (9, 1024, 3072),
    (23, 769, 1000),
    (31, 83, 264),
    (8, 4096, 1024),
    (8, 1024, 2048),
    (8, 1024, 3072),
    (2, 6144, 1024),
    (5, 769, 1000),
)
# the prologue: q/k/v and gate/up at b32 and b9, an odd N and a small K; q/k/v at b8 and gate/up at b3 (one m16 tile)
NORM_SHAPES = ((32, 4096, 1024), (9, 6144, 1024), (17, 769, 1024), (32, 83, 264), (8, 4096, 1024), (3, 6144, 1024))
SMALL = {(31, 83, 264), (17, 769, 1024), (5, 769, 1000)}  # the sanitizer's cases


def run_plain(x: Inputs) -> torch.Tensor:
    return gemm_small.linear(x["x"], x["weight"])


def run_norm(x: Inputs) -> torch.Tensor:  # [rows, n + k]: y, then the new residual
    return torch.cat(gemm_small.add_rms_norm_linear(*norm_args(x)[:5]), dim=-1)


def norm_then_gemm(x: Inputs) -> torch.Tensor:
    """The norm kernel, then the plain small GEMM: what the prologue must equal bit for bit."""
    normed, residual = ref_gemv.pre_norm(norm, x["x"], x["residual"], x["norm_weight"], EPS)
    return torch.cat([gemm_small.linear(normed, x["weight"]), residual], dim=-1)


def build_cases() -> list[KernelCase]:
    cases = []
    for dt, dtype in DTYPES.items():
        for m, n, k in PLAIN_SHAPES:
            make = partial(norm_inputs, dtype=dtype, m=m, n=n, k=k, first=True, bias=False)
            tags = ("small",) if (m, n, k) in SMALL else ()
            name = f"gemm_small/plain/{dt}/m{m}/n{n}/k{k}"
            cases.append(KernelCase(name, "gemm_small", FLAG, dtype, make, run_plain, ref_linear, dt, ROW, tags))
        for m, n, k in NORM_SHAPES:
            for first in (False, True):
                make = partial(norm_inputs, dtype=dtype, m=m, n=n, k=k, first=first, bias=False)
                tags = ("small",) if (m, n, k) in SMALL and not first else ()
                name = f"gemm_small/norm/{dt}/m{m}/n{n}/k{k}" + ("/first" if first else "")
                arm = "prologue_gemm_small"  # a by-name arm: no flag selects it
                cases += [
                    KernelCase(name, arm, None, dtype, make, run_norm, ref_norm_gemv, dt, ROW, tags),
                    KernelCase(name + "/exact", arm, None, dtype, make, run_norm, norm_then_gemm, "exact", ROW),
                ]
    return cases


CASES = build_cases()
