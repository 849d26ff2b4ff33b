#!/usr/bin/env python3
"""The cost of `rowgate preflight --baseline` on this repository against one plain preflight, in one run.

Arms, interleaved, each in process on the same checkout: `plain` (every gate on the head, as `rowgate
preflight --base REF`) and `baseline` (the same, plus the base's worktree made from the object store, the
non-commit gates on it and the comparison; the upstream-fix search is off, as it is when the branch is up
to date with REF). Prints each arm's median with its min-max band and
the per-pair ratio baseline / plain.

Usage: scripts/bench-checkers.py baseline [--base REF] [--reps N] [--ledger PATH]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared bench helpers beside this file

from _measure import write_ledger  # noqa: E402

from checkers.baseline import run_baseline  # noqa: E402
from checkers.config import load_config  # noqa: E402
from checkers.context import Context  # noqa: E402
from checkers.preflight import run_preflight  # noqa: E402


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--base", default="main", help="the base ref (default: main)")
    parser.add_argument("--reps", type=int, default=3, help="timed pairs after a warm-up pair (default 3)")
    parser.add_argument("--ledger", type=Path, help="also write a schema-2 ledger record (JSON) here")
    args = parser.parse_args(argv)

    def context() -> Context:
        return Context(root=REPO_ROOT, config=load_config(REPO_ROOT), env={}, notes=io.StringIO())

    def plain() -> str:
        results = run_preflight(context(), base=args.base)
        return f"{len(results)} gates"

    def baseline() -> str:
        report = run_baseline(context(), args.base, max_probes=0)
        ran = sum(g.base is not None for g in report.gates)
        return f"{len(report.gates)} gates on the head, {ran} on the base"

    times: dict[str, list[float]] = {"plain": [], "baseline": []}
    for rep in range(args.reps + 1):
        for name, fn in (("plain", plain), ("baseline", baseline)):
            start = time.perf_counter()
            what = fn()
            took = time.perf_counter() - start
            print(f"rep {rep}{' (warm-up)' if rep == 0 else ''}: {name}: {took:.2f}s ({what})", file=sys.stderr)
            if rep:
                times[name].append(took)
    ratios = [b / p for p, b in zip(times["plain"], times["baseline"], strict=True)]
    for name, ts in times.items():
        print(f"{name:<9} median {statistics.median(ts):.2f}s (min {min(ts):.2f}s, max {max(ts):.2f}s)")
    summary = (
        f"baseline / plain per pair: median {statistics.median(ratios):.2f}x "
        f"(min {min(ratios):.2f}x, max {max(ratios):.2f}x) over {len(ratios)} pairs"
    )
    print(summary)
    if args.ledger:
        write_ledger(
            args.ledger,
            ["GOV-CONTRIB"],
            f"scripts/bench-checkers.py baseline --base {args.base} --reps {args.reps}",
            summary,
            {name: [round(t, 3) for t in ts] for name, ts in times.items()},
            figures=[
                {"name": "baseline_over_plain", "value": round(statistics.median(ratios), 2), "unit": "x"},
                {"name": "plain_preflight", "value": round(statistics.median(times["plain"]), 2), "unit": "s"},
                {"name": "baseline_preflight", "value": round(statistics.median(times["baseline"]), 2), "unit": "s"},
            ],
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
