"""cuBLASLt's candidate algorithms against cuBLAS's own pick, on Qwen3-0.6B's decode projections, in one process.

At 32 rows the step's projections run cuBLAS's one-wave 64x16 tiles at about a third of DRAM's rate (ncu, H100), and
no hand-written GEMM here has beaten them. Before writing another, this asks cuBLASLt's heuristic for its other
algorithms (other tiles, split-K, stages) and times each against `F.linear`, every one as a CUDA graph of calls over
rotating weight sets (so W comes from DRAM):

    python -m lab bench gemm_lt [--rows 32] [--algos 16] [--reps 12] [--dtype bfloat16] [--ledger DIR]

A screen of every usable candidate (`--screen` reps each, interleaved with cuBLAS), then the fastest one against
cuBLAS again with `--reps` interleaved pairs (lab.bench.stats: rep 0 dropped, medians, bands, per-pair ratios), so
the pick is not judged on the samples that picked it. A candidate whose output differs from cuBLAS's by more than
bf16 rounding allows is left out and named. Prints one table, last: per shape cuBLAS's time, the fastest
candidate's, the ratio (cuBLAS over it: > 1 is faster), W's bandwidth at each, and what the candidate is."""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from lab.bench.cublaslt import Algo, Lt, Problem
from lab.bench.gemm_small import SHAPES
from lab.bench.stats import ab_verdict, drop_warmup
from lab.bench.timing import arm_timer, sets_for
from lab.gates.ledger import figure, write_record

PLAIN = [(name, n, k) for name, n, k, norm in SHAPES if not norm]  # q/k/v, o, gate/up, down
LAYERS = 28  # Qwen3-0.6B: the step runs each projection once a layer
# |candidate - cuBLAS| over max |cuBLAS|: two fp32-accumulated sums of the same products, each rounded to bf16
# (2^-8 relative) and perhaps split in K; a wrong layout or operand is off by the output's own size
TOLERANCE = 2.0**-6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab bench gemm_lt", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=32, help="rows of x (the decode batch); default 32")
    p.add_argument("--algos", type=int, default=16, help="candidates asked of the heuristic per shape; default 16")
    p.add_argument("--screen", type=int, default=4, help="interleaved reps per candidate in the screen; default 4")
    p.add_argument("--reps", type=int, default=12, help="interleaved pairs of the fastest against cuBLAS; default 12")
    p.add_argument("--dtype", choices=["bfloat16", "float16"], default="bfloat16")
    p.add_argument("--ledger", type=Path, metavar="DIR", help="write the ledger record (the table, per shape) into DIR")
    p.add_argument("--allow-dirty", action="store_true", help="write the record from a tree that differs from HEAD")
    args = p.parse_args(argv)
    for name in ("rows", "algos"):
        if getattr(args, name) < 1:
            p.error(f"--{name} {getattr(args, name)}: must be at least 1")
    for name in ("screen", "reps"):
        if getattr(args, name) < 2:
            p.error(f"--{name} {getattr(args, name)}: must be at least 2 (rep 0 is dropped)")
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device (cuBLAS and cuBLASLt run only on a GPU)")
        return 0
    dev, dtype = torch.device("cuda"), getattr(torch, args.dtype)
    lt = Lt(dev)
    rows = []
    for name, n, k in PLAIN:
        print(f"{name}: {n} x {k} at {args.rows} rows ...", flush=True)
        rows.append(measure(lt, name, n, k, args, dev, dtype))
    print(render(rows, args.rows, args.dtype, torch.cuda.get_device_name(dev)))
    if not any(r.get("best") for r in rows):
        print("FAIL: no cuBLASLt candidate ran correctly on any shape")
        return 1
    if args.ledger:
        argv_ = argv if argv is not None else sys.argv[1:]
        path = record(args.ledger, rows, args, "python -m lab bench gemm_lt " + " ".join(argv_))
        print(f"ledger: {path}")
    return 0


def measure(lt: Lt, name: str, n: int, k: int, args: argparse.Namespace, dev: torch.device, dtype: torch.dtype) -> dict:
    g = torch.Generator().manual_seed(0)
    w_bytes = n * k * torch.tensor([], dtype=dtype).element_size()
    sets = []
    for _ in range(sets_for(w_bytes)):
        x = torch.randn(args.rows, k, generator=g).to(dtype).to(dev)
        w = (torch.randn(n, k, generator=g) / k**0.5).to(dtype).to(dev)
        sets.append((x, w, torch.empty(args.rows, n, dtype=dtype, device=dev)))
    problem = Problem(args.rows, n, k)
    found = lt.candidates(problem, dtype, args.algos)
    x, w, y = sets[0]
    ref = F.linear(x, w).float()
    scale = ref.abs().max().item() or 1.0
    usable: list[Algo] = []
    wrong: list[Algo] = []
    for algo in found:
        err = (lt.run(algo, x, w, y).float() - ref).abs().max().item() / scale
        (usable if err <= TOLERANCE else wrong).append(algo)
    row: dict[str, Any] = {"name": name, "n": n, "k": k, "asked": args.algos, "found": len(found)}
    row["wrong"] = [a.label() for a in wrong]
    if not usable:
        return row

    def base(x, w, y):
        return F.linear(x, w)

    def arm(algo: Algo):
        return lambda x, w, y: lt.run(algo, x, w, y)

    tb = arm_timer(base, sets, dev)
    timers = {a.rank: arm_timer(arm(a), sets, dev) for a in usable}
    screen: dict[int, list[float]] = {a.rank: [] for a in usable}
    for rep in range(args.screen):  # each candidate beside cuBLAS, rep by rep
        for a in usable:
            screen[a.rank].append(tb.sample(rep) / timers[a.rank].sample(rep))
    best = max(usable, key=lambda a: statistics.median(drop_warmup(screen[a.rank])))
    base_s, test_s = [], []
    for rep in range(args.reps):
        base_s.append(tb.sample(rep))
        test_s.append(timers[best.rank].sample(rep))
    v = ab_verdict(drop_warmup(base_s), drop_warmup(test_s))
    row.update(
        best=best.label(),
        best_rank=best.rank,
        best_config=best.config,
        best_algo=best.raw.hex(),  # the descriptor itself: the same library on the same card runs it again as is
        best_waves=best.waves,
        base_us=v.base.median * 1e6,
        test_us=v.test.median * 1e6,
        base_tbs=w_bytes / v.base.median / 1e12,
        test_tbs=w_bytes / v.test.median / 1e12,
        ratio=v.median_ratio,
        verdict=v.label,
        screened=len(usable),
    )
    return row


def render(rows: list[dict[str, Any]], m: int, dtype: str, device: str) -> str:
    lines = [f"cuBLASLt's candidates vs cuBLAS (F.linear), {m} rows, {dtype}, {device}"]
    lines.append(
        f"{'shape':<9}{'n':>6}{'k':>6}{'cuBLAS us':>11}{'best us':>9}{'cuBLAS TB/s':>13}{'best TB/s':>11}"
        f"{'ratio':>8}  {'verdict':<14}{'screened':>9}  fastest candidate"
    )
    saved = 0.0
    for r in rows:
        if not r.get("best"):
            lines.append(f"{r['name']:<9}{r['n']:>6}{r['k']:>6}  no usable candidate of {r['found']}")
            continue
        lines.append(
            f"{r['name']:<9}{r['n']:>6}{r['k']:>6}{r['base_us']:>11.2f}{r['test_us']:>9.2f}{r['base_tbs']:>13.2f}"
            f"{r['test_tbs']:>11.2f}{r['ratio']:>8.3f}  {r['verdict']:<14}{r['screened']:>9}  {r['best']}"
        )
        if r["verdict"] == "win":
            saved += r["base_us"] - r["test_us"]
    for r in rows:
        if r.get("wrong"):
            lines.append(
                f"  {r['name']}: left out, output off cuBLAS's by more than {TOLERANCE:g}: {'; '.join(r['wrong'])}"
            )
    lines.append(f"the wins together: {saved:.1f} us a layer, {saved * LAYERS / 1e3:.3f} ms a step of {LAYERS} layers")
    return "\n".join(lines)


def record(ledger: Path, rows: list[dict[str, Any]], args: argparse.Namespace, command: str) -> Path:
    """One record: every shape's row; figures: each shape's ratio (cuBLAS time over the fastest candidate's)."""
    timed = [r for r in rows if r.get("best")]
    spans = ", ".join(f"{r['name']} {r['ratio']:.2f}x ({r['verdict']})" for r in timed)
    summary = f"cuBLASLt's fastest candidate vs cuBLAS at {args.rows} rows, {args.dtype}: {spans} (> 1: faster)"
    return write_record(
        ledger,
        "gemm-lt-vs-cublas",
        ["ENGINE-PERSISTENT"],
        command,
        "cuda",
        summary,
        {"rows": args.rows, "dtype": args.dtype, "shapes": rows},
        kind="bench",
        figures=[figure(f"{r['name']}_ratio", r["ratio"], "x") for r in timed],
        allow_dirty=args.allow_dirty,
    )


if __name__ == "__main__":
    raise SystemExit(main())
