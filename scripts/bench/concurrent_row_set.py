"""Concurrent `rowgate row set` on this repository's real records: N writers on N different rows at once
(each a separate `python -m checkers` process), against one writer alone in the same run.

Runs on a temporary clone of the repository (its committed records), so nothing here is written. Prints
each writer's exit status and wall time, how many succeeded, the slowest, and the ratio of the slowest
concurrent writer to the lone one.

Usage: scripts/bench-checkers.py concurrent-row-set [--writers 30] [--repo PATH] [--ledger PATH]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _row_set(repo: Path, row: str, state: str, timeout_s: float) -> tuple[int, float, str]:
    """(exit status, wall seconds, stderr) of one `row set`; a writer still running after `timeout_s` is
    killed and reported as exit 124."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "checkers", "row", "set", row, "--state", state, "--repo", str(repo)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return 124, time.perf_counter() - start, f"still running after {timeout_s:g}s"
    return proc.returncode, time.perf_counter() - start, proc.stderr


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, default=30)
    parser.add_argument("--repo", type=Path, default=ROOT, help="repository whose records are cloned")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds before a writer is killed")
    parser.add_argument("--ledger", type=Path, help="also write a schema-2 ledger record (JSON) here")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared bench helpers beside this file
    from _measure import write_ledger

    from checkers.records import load_records

    with tempfile.TemporaryDirectory(prefix="rowgate-bench-rowset-") as tmp:
        clone = Path(tmp) / "repo"
        subprocess.run(["git", "clone", "-q", "--no-checkout", str(args.repo), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "-q", "HEAD"], check=True)
        rows = load_records(clone).rows
        # rows whose current state the writer sets again: every requirement is checked and the row rewritten
        chosen = sorted(rows)[: args.writers + 1]
        if len(chosen) < args.writers + 1:
            print(f"only {len(chosen)} rows in {args.repo}", file=sys.stderr)
            return 2
        lone_row, others = chosen[0], chosen[1:]
        code, lone, err = _row_set(clone, lone_row, rows[lone_row].model.state, args.timeout)
        print(f"lone writer: {lone_row}: exit {code} in {lone:.1f}s")
        start = time.perf_counter()
        with ThreadPoolExecutor(len(others)) as pool:
            results = list(pool.map(lambda r: (r, *_row_set(clone, r, rows[r].model.state, args.timeout)), others))
        wall = time.perf_counter() - start
    ok = [r for r in results if r[1] == 0]
    on_lock = [r for r in results if "is held by" in r[3]]
    for row, code, took, err in results:
        tail = "" if code == 0 else f"  {err.strip().splitlines()[0] if err else ''}"
        print(f"  {row:28s} exit {code}  {took:6.1f}s{tail}")
    slowest = max(t for _, _, t, _ in results)
    summary = (
        f"{len(ok)}/{len(results)} concurrent `row set` succeeded; all done in {wall:.1f}s, slowest {slowest:.1f}s "
        f"= {slowest / lone:.1f} x one writer alone ({lone:.1f}s); {len(on_lock)} gave up waiting for the lock; "
        f"{os.cpu_count()} CPUs"
    )
    print(summary)
    if args.ledger:
        write_ledger(
            args.ledger,
            ["GOV-HOSTILE"],
            f"scripts/bench-checkers.py concurrent-row-set --writers {args.writers}",
            summary,
            {"writers": len(results), "succeeded": len(ok), "gave_up_on_lock": len(on_lock)},
            figures=[
                {"name": "all_writers_done", "value": round(wall, 1), "unit": "s"},
                {"name": "slowest_writer", "value": round(slowest, 1), "unit": "s"},
                {"name": "one_writer_alone", "value": round(lone, 1), "unit": "s"},
            ],
        )
    return 0 if len(ok) == len(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
