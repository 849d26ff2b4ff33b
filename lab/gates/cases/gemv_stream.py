"""Numerics cases for the streamed decode GEMV (row ENGINE-PERF; gemv_stream.cuh, sm_90): plain, GLU epilogue, and
the residual add + RMSNorm prologue (plain and GLU), each launched plainly and as a programmatic dependent. Each is
held to the torch reference within its dtype's tolerance, and bit for bit ("exact") to the default kernels it
replaces: its per-output sum order is the fast path's, split-K partials included."""

from __future__ import annotations

from functools import partial

import torch

from engine.cuda import gemv, gemv_stream
from lab.gates.cases import Inputs, KernelCase
from lab.gates.cases.decode_fused import (
    DTYPES,
    PrologueArm,
    glu_trios,
    norm_args,
    norm_inputs,
    norm_trios,
    ref_linear,
    trio,
)

# (rows, out_features, in_features): Qwen3-0.6B's five decode GEMVs (q/k/v, o_proj and down split K, gate/up, the
# head), a few rows, an odd N with a bias, K 264 (a partial chunk), 8 rows of K 2048
PLAIN_SHAPES = (
    (1, 4096, 1024),
    (1, 1024, 2048),
    (1, 6144, 1024),
    (1, 1024, 3072),
    (1, 151936, 1024),
    (3, 769, 1024),
    (8, 83, 2048),
    (2, 4099, 264),
    (4, 9001, 1024),
)
# (rows, out_features, in_features) of the norm prologue: q/k/v, a few rows, a small odd N
NORM_SHAPES = ((1, 4096, 1024), (3, 769, 1024), (2, 4099, 264))
# (rows, 2 * intermediate, in_features) of the GLU forms: gate/up, a few rows, a small K with a bias
GLU_SHAPES = ((1, 6144, 1024), (3, 6144, 1024), (8, 4224, 264))
SMALL = {(3, 769, 1024), (2, 4099, 264)}
H200 = (132, 227 * 1024)  # the gate's device: SMs, and the shared memory a block may opt in to


def offered(dtype: torch.dtype, m: int, items: int, k: int, rows_per_item: int) -> bool:
    """The shapes the arm takes on an H200 (gemv_stream.supports on its device): x staged within MAX_STAGED_BYTES and two
    items per warp in the ring. fp32 refuses 8 rows of K 2048 (64 KB of x) and the GLU pairs of K 1024 (two 4 KB rows
    an item: one slot where a warp takes three pairs); there the table runs the other arms."""
    elt = torch.empty((), dtype=dtype).element_size()
    return m * k * elt <= gemv.MAX_STAGED_BYTES and gemv_stream.supports_ring(m, items, k, elt, rows_per_item, *H200)


def run_plain(pdl: bool, x: Inputs) -> torch.Tensor:
    return gemv_stream.linear(x["x"], x["weight"], x["bias"], pdl=pdl)


def default_plain(x: Inputs) -> torch.Tensor:
    return gemv.linear(x["x"], x["weight"], x["bias"])


def run_glu(pdl: bool, x: Inputs) -> torch.Tensor:
    return gemv_stream.linear(x["x"], x["weight"], x["bias"], pdl=pdl, glu=True)


def run_norm(pdl: bool, x: Inputs, glu: bool = False) -> torch.Tensor:  # [rows, n + k]: y, then the new residual
    return torch.cat(gemv_stream.add_rms_norm_linear(*norm_args(x), pdl=pdl, glu=glu), dim=-1)


def run_norm_glu(pdl: bool, x: Inputs) -> torch.Tensor:
    return run_norm(pdl, x, glu=True)


STREAM = PrologueArm("_stream", "VT_GEMV_STREAM", "VT_GEMV_STREAM", run_norm, run_norm_glu, run_glu)


def build_cases() -> list[KernelCase]:
    cases = []
    for dt, dtype in DTYPES.items():
        for m, n, k in PLAIN_SHAPES:
            if not offered(dtype, m, n, k, 1):
                continue
            bias = n in (769, 9001)
            make = partial(norm_inputs, dtype=dtype, m=m, n=n, k=k, first=True, bias=bias)
            name = f"fused/gemv_stream/{dt}/m{m}/n{n}/k{k}" + ("/bias" if bias else "")
            against = (ref_linear, default_plain)
            cases += trio(name, "gemv_stream", "VT_GEMV_STREAM", dt, make, run_plain, against, (m, n, k) in SMALL)
        for m, n, k in NORM_SHAPES:
            if offered(dtype, m, n, k, 1):
                cases += norm_trios(STREAM, dt, m, n, k, (m, n, k) in SMALL)
        for m, n, k in GLU_SHAPES:
            if offered(dtype, m, n // 2, k, 2):
                cases += glu_trios(STREAM, dt, m, n, k)
    return cases


CASES = build_cases()
