"""The small decode GEMM against cuBLAS in one process: Qwen3-0.6B's b32 projections, each timed as a CUDA graph of
calls over rotating weight sets (so W comes from DRAM), the two arms interleaved rep by rep, rep 0 dropped, medians
with min-max bands and per-pair ratios (lab.bench.stats). Plain rows compare `F.linear` with the small GEMM; norm rows
compare today's chain (the norm kernel, then `F.linear`) with the GEMM's add + RMSNorm prologue.

    python -m lab bench gemm_small [--rows 32] [--reps 12] [--dtype bfloat16] [--ledger DIR]

Prints one table, last: per shape the two medians in microseconds, W's bandwidth at each, the ratio (cuBLAS time over
the small GEMM's: > 1 is faster) with its verdict, and the largest difference of the outputs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from engine.cuda import gemm_small, norm
from lab.bench.stats import ab_verdict, drop_warmup
from lab.bench.timing import arm_timer, sets_for
from lab.gates.ledger import figure, write_record

# (name, n, k, with the norm prologue): q/k/v merged, o, gate/up merged, down of Qwen3-0.6B
SHAPES = [
    ("qkv", 4096, 1024, False),
    ("o", 1024, 2048, False),
    ("gate_up", 6144, 1024, False),
    ("down", 1024, 3072, False),
    ("qkv+norm", 4096, 1024, True),
    ("gate_up+norm", 6144, 1024, True),
]
EPS = 1e-6
REFUSED = "refused"  # a shape the small GEMM does not take at the rows asked (its shared memory, say): not timed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab bench gemm_small", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=32)
    p.add_argument("--reps", type=int, default=12)
    p.add_argument("--dtype", choices=["bfloat16", "float16"], default="bfloat16")
    p.add_argument("--ledger", type=Path, metavar="DIR", help="write the ledger record (the table, per shape) into DIR")
    p.add_argument("--allow-dirty", action="store_true", help="write the record from a tree that differs from HEAD")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device (the small GEMM and cuBLAS run only on a GPU)")
        return 0
    dev, dtype = torch.device("cuda"), getattr(torch, args.dtype)
    rows = [measure(name, n, k, pro, args.rows, args.reps, dev, dtype) for name, n, k, pro in SHAPES]
    print(f"small GEMM vs cuBLAS, {args.rows} rows, {args.dtype}, {torch.cuda.get_device_name(dev)}")
    print(
        f"{'shape':<13}{'n':>6}{'k':>6}{'cuBLAS us':>11}{'small us':>10}{'cuBLAS TB/s':>13}{'small TB/s':>12}"
        f"{'ratio':>8}  {'verdict':<14}{'max |diff|':>10}"
    )
    for r in rows:
        if r["verdict"] == REFUSED:  # the small GEMM does not take the shape at these rows: nothing was timed
            print(f"{r['name']:<13}{r['n']:>6}{r['k']:>6}{'':>54}  {REFUSED}")
            continue
        print(
            f"{r['name']:<13}{r['n']:>6}{r['k']:>6}{r['base_us']:>11.2f}{r['test_us']:>10.2f}{r['base_tbs']:>13.2f}"
            f"{r['test_tbs']:>12.2f}{r['ratio']:>8.3f}  {r['verdict']:<14}{r['diff']:>10.2e}"
        )
    if all(r["verdict"] == REFUSED for r in rows):
        print(f"FAIL: the small GEMM took none of the {len(rows)} shapes at {args.rows} rows")
        return 1
    if args.ledger:
        argv_ = argv if argv is not None else sys.argv[1:]
        command = "python -m lab bench gemm_small " + " ".join(argv_)
        path = record(args.ledger, rows, args.rows, args.dtype, command, args.allow_dirty)
        print(f"ledger: {path}")
    return 0


def record(ledger: Path, rows: list[dict[str, Any]], m: int, dtype: str, command: str, allow_dirty: bool) -> Path:
    """One record: every shape's medians, ratio and verdict; the plain and the prologue shapes' worst ratios as
    figures (ratio = cuBLAS time over the small GEMM's; > 1 is the small GEMM faster), over the shapes it took."""
    timed = [r for r in rows if r["verdict"] != REFUSED]
    kinds = {"plain": [r["ratio"] for r in timed if "+norm" not in r["name"]]}
    kinds["prologue"] = [r["ratio"] for r in timed if "+norm" in r["name"]]
    spans = [f"{kind} {min(v):.2f}-{max(v):.2f}x" for kind, v in kinds.items() if v]
    refused = [r["name"] for r in rows if r["verdict"] == REFUSED]
    summary = f"small GEMM vs cuBLAS at {m} rows, {dtype}: " + ", ".join(spans) + " (> 1: the small GEMM faster)"
    if refused:
        summary += f"; refused: {', '.join(refused)}"
    return write_record(
        ledger,
        "gemm-small-vs-cublas",
        ["ENGINE-PERSISTENT"],
        command,
        "cuda",
        summary,
        {"rows": m, "dtype": dtype, "shapes": rows},
        kind="bench",
        figures=[figure(f"worst_{kind}_ratio", min(v), "x") for kind, v in kinds.items() if v],
        allow_dirty=allow_dirty,
    )


def measure(name: str, n: int, k: int, pro: bool, m: int, reps: int, dev: torch.device, dtype: torch.dtype) -> dict:
    g = torch.Generator().manual_seed(0)
    w_bytes = n * k * torch.tensor([], dtype=dtype).element_size()
    sets = []
    for _ in range(sets_for(w_bytes)):
        x = torch.randn(m, k, generator=g).to(dtype).to(dev)
        res = torch.randn(m, k, generator=g).to(dtype).to(dev)
        nw = (torch.rand(k, generator=g) + 0.5).to(dtype).to(dev)
        w = (torch.randn(n, k, generator=g) / k**0.5).to(dtype).to(dev)
        sets.append((x, res, nw, w))
    x, res, _, w = sets[0]
    if not gemm_small.supports(m, w, x, *([res] if pro else [])):
        return {"name": name, "n": n, "k": k, "verdict": REFUSED}
    base, test = arms(pro)
    diff = (base(*sets[0]).float() - test(*sets[0]).float()).abs().max().item()
    tb, tt = arm_timer(base, sets, dev), arm_timer(test, sets, dev)
    base_s, test_s = [], []
    for rep in range(reps):  # interleaved: each pair ran back to back
        base_s.append(tb.sample(rep))
        test_s.append(tt.sample(rep))
    v = ab_verdict(drop_warmup(base_s), drop_warmup(test_s))
    return {
        "name": name,
        "n": n,
        "k": k,
        "base_us": v.base.median * 1e6,
        "test_us": v.test.median * 1e6,
        "base_tbs": w_bytes / v.base.median / 1e12,
        "test_tbs": w_bytes / v.test.median / 1e12,
        "ratio": v.median_ratio,
        "verdict": v.label,
        "diff": diff,
    }


def arms(pro: bool) -> tuple[Callable[..., torch.Tensor], Callable[..., torch.Tensor]]:
    """(cuBLAS chain, small GEMM) over one input set (x, residual, norm weight, W)."""
    if not pro:
        return (lambda x, res, nw, w: F.linear(x, w)), (lambda x, res, nw, w: gemm_small.launch_linear(x, w))

    def base(x, res, nw, w):
        return F.linear(norm.fused_add_rms_norm(x, res, nw, EPS)[0], w)

    def test(x, res, nw, w):
        return gemm_small.launch_add_rms_norm_linear(x, res, nw, EPS, w)[0]

    return base, test


if __name__ == "__main__":
    raise SystemExit(main())
