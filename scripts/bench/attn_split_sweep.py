#!/usr/bin/env python3
"""Split-count sweep of the tiled decode attention: graph-replayed time per split count and shape,
against the split rule's pick and the fastest SDPA peer of the same run (CUDA only).

The split rule (engine/cuda/paged_attn_tiled.cuh, tiled_num_splits) is tuned from this table.

    python scripts/bench/attn_split_sweep.py [--reps 7] [--ledger DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared bench helpers beside this file

from _measure import Progress  # noqa: E402

from engine.cuda import paged_attn_tiled  # noqa: E402
from lab.bench.timing import arm_timer, sets_for  # noqa: E402
from lab.bench.workloads import ATTN, parse_shape  # noqa: E402
from lab.gates.ledger import write_record  # noqa: E402

# batch 1 at a decode step's contexts, batch 64 (split 1 fills the GPU), head_dim 256
SHAPES = [
    "batch=1,ctx=1024,hq=16,hkv=8",
    "batch=1,ctx=4096,hq=16,hkv=8",
    "batch=1,ctx=32768",
    "batch=8,ctx=2048,hq=16,hkv=8",
    "batch=64,ctx=4096",
    "hq=16,hkv=2,d=256",
]
SPLITS = [1, 2, 4, 8, 12, 16, 24, 32, 48, 64]


def median_ms(fn, sets, device: torch.device, reps: int) -> float:
    timer = arm_timer(fn, sets, device, "graph")
    samples = [timer.sample(r) for r in range(reps + 1)]
    return statistics.median(samples[1:]) * 1e3  # sample 0 warms up and is dropped


def sweep(text: str, device: torch.device, reps: int) -> dict:
    s = parse_shape(text, ATTN.defaults)
    sets = [ATTN.make(s, device, torch.bfloat16, seed) for seed in range(sets_for(ATTN.bytes_moved(s, torch.bfloat16)))]
    q, k, v, table, lens, scale = sets[0]
    rule = paged_attn_tiled.num_splits(
        s["batch"] * s["hkv"], table.shape[1] * s["block"], s["d"], q.dtype, device.index or 0
    )
    tiles = -(-s["ctx"] // 64)
    row = {"shape": text, "rule": rule, "ms": {}}
    for n in [x for x in SPLITS if x <= max(1, tiles)]:
        row["ms"][n] = median_ms(lambda *a, n=n: paged_attn_tiled.decode(*a, splits=n), sets, device, reps)
    prep, run = ATTN.peers["sdpa-cudnn"]
    try:
        peer_sets = [prep(*x) for x in sets]
        row["sdpa_cudnn_ms"] = median_ms(run, peer_sets, device, reps)
    except RuntimeError as exc:
        row["sdpa_cudnn_ms"] = None
        row["sdpa_note"] = str(exc).splitlines()[0][:120]
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=7, help="timing samples per point (default 7)")
    p.add_argument(
        "--shape",
        action="append",
        help="KEY=INT,... over attn-decode's defaults (repeatable; default: the built-in list)",
    )
    p.add_argument("--ledger", type=Path, metavar="DIR", help="write the ledger record into DIR")
    p.add_argument(
        "--allow-dirty", action="store_true", help="write the ledger record from a tree that differs from HEAD"
    )
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("attn_split_sweep: needs a CUDA device", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    shapes = args.shape or SHAPES
    progress, rows = Progress(len(shapes), "attn-split-sweep"), []
    for text in shapes:
        start = time.perf_counter()
        rows.append(sweep(text, device, args.reps))
        progress.step(text, time.perf_counter() - start)
    print(f"{'shape':<34} {'rule':>4} {'best':>4} {'rule ms':>8} {'best ms':>8} {'cudnn ms':>8}  ms per split count")
    for r in rows:
        best = min(r["ms"], key=r["ms"].get)
        cells = " ".join(f"{n}:{ms:.4f}" for n, ms in r["ms"].items())
        rule_ms = r["ms"].get(r["rule"], float("nan"))
        cudnn = r["sdpa_cudnn_ms"]
        print(
            f"{r['shape']:<34} {r['rule']:>4} {best:>4} {rule_ms:>8.4f} {r['ms'][best]:>8.4f} "
            f"{cudnn if cudnn is not None else float('nan'):>8.4f}  {cells}"
        )
    if args.ledger:
        cmd = "python scripts/bench/attn_split_sweep.py " + " ".join(argv if argv is not None else sys.argv[1:])
        summary = "; ".join(f"{r['shape']}: rule {r['rule']} vs best {min(r['ms'], key=r['ms'].get)}" for r in rows)
        path = write_record(
            args.ledger,
            "attn-split-sweep",
            ["KERNEL-ATTN-PAGED", "ENGINE-BENCH"],
            cmd,
            str(device),
            summary,
            rows,
            kind="bench",
            allow_dirty=args.allow_dirty,
        )
        print(f"ledger: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
