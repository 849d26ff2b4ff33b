"""The record checks on a full vllm.cpp clone, timed beside vllm.cpp's own scripts in the same run.

Usage: scripts/bench-checkers.py vllmcpp-records PATH [--config FILE] [--commits N] [--reps N] [--ledger FILE]

PATH is a clean clone of github.com/mudler/vllm.cpp (measured at d85906ae). The config is the documented
example, docs/checks/examples/vllm.cpp.records.yaml, passed with --config (the clone is not changed). It
prints each tool's verdict and median wall time (each a fresh process, start-up included), whether the
per-matrix counts agree, and doc-checkpoint's verdict on each of the last N non-merge commits beside
vllm.cpp's `scripts/check-doc-checkpoint.py --commit` on the same commit. vllm.cpp's scripts are run from
the clone: run this only on a clone you trust.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]
EXAMPLE = HERE / "docs" / "checks" / "examples" / "vllm.cpp.records.yaml"


def _rowgate(clone: Path, config: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "checkers", *args, "--repo", str(clone), "--config", str(config)]


def _timed(cmd: list[str], cwd: Path, reps: int) -> tuple[float, subprocess.CompletedProcess[str]]:
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    times, proc = [], None
    for _ in range(reps):
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        times.append(time.perf_counter() - start)
    assert proc is not None
    return statistics.median(times), proc


def _counts(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"\b([A-Z]+)=(\d+)\b", text)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("clone", type=Path)
    parser.add_argument("--config", type=Path, default=EXAMPLE, help="rowgate config (default: the documented example)")
    parser.add_argument("--commits", type=int, default=40, help="non-merge commits for the doc-checkpoint comparison")
    parser.add_argument("--reps", type=int, default=3, help="timed runs of each command (median)")
    parser.add_argument("--ledger", type=Path, help="also write a schema-2 ledger record (JSON) here")
    args = parser.parse_args(argv)
    clone, config = args.clone.resolve(), args.config.resolve()
    rows = []

    ours_t, ours = _timed(_rowgate(clone, config, "check", "agent-record"), clone, args.reps)
    theirs_t, theirs = _timed([sys.executable, "scripts/check-agent-record.py"], clone, args.reps)
    ours_counts = _counts(next((ln for ln in ours.stdout.splitlines() if ln.startswith(("rows:", "OK:"))), ""))
    theirs_counts = _counts(theirs.stdout)
    rows.append(("agent-record", ours_t, ours.stdout.strip().splitlines()[-1], theirs_t, theirs.stdout.strip()))
    print(f"per-matrix counts: rowgate {ours_counts}  vllm.cpp {theirs_counts}  agree: {ours_counts == theirs_counts}")

    t, proc = _timed(_rowgate(clone, config, "check", "live-rows", "--report"), clone, args.reps)
    rows.append(("live-rows --report", t, proc.stdout.strip().splitlines()[-1], None, "(no script of its own)"))
    base = f"HEAD~{args.commits}"
    t, proc = _timed(_rowgate(clone, config, "check", "role-discipline", "--base", base), clone, args.reps)
    rows.append(
        (f"role-discipline {base}..HEAD", t, proc.stdout.strip().splitlines()[-1], None, "(no script of its own)")
    )

    shas = subprocess.run(
        ["git", "rev-list", "--no-merges", f"--max-count={args.commits}", "HEAD"],
        cwd=clone,
        capture_output=True,
        text=True,
    ).stdout.split()
    agree = 0
    ours_total = theirs_total = 0.0
    for sha in shas:
        t1, mine = _timed(
            _rowgate(clone, config, "check", "doc-checkpoint", "--base", f"{sha}^", "--head", sha, "--format", "json"),
            clone,
            1,
        )
        t2, their = _timed([sys.executable, "scripts/check-doc-checkpoint.py", "--commit", sha], clone, 1)
        ours_total, theirs_total = ours_total + t1, theirs_total + t2
        status = json.loads(mine.stdout)["results"][0]["status"]
        same = (status == "pass") == (their.returncode == 0)
        agree += same
        if not same:
            print(f"doc-checkpoint disagrees on {sha[:12]}: rowgate {status}, vllm.cpp exit {their.returncode}")
    rows.append(
        (
            f"doc-checkpoint, {len(shas)} commits one by one",
            ours_total,
            f"{agree} of {len(shas)} verdicts agree",
            theirs_total,
            "check-doc-checkpoint.py --commit, each",
        )
    )
    t, proc = _timed(_rowgate(clone, config, "check", "doc-checkpoint", "--base", base), clone, args.reps)
    t2, their = _timed(
        [sys.executable, "scripts/check-doc-checkpoint.py", "--base", base, "--head", "HEAD"], clone, args.reps
    )
    # its range includes merges, each judged by its diff against its first parent; rowgate judges non-merges
    failed = {ln.split()[2].rstrip(":") for ln in their.stderr.splitlines() if ln.startswith("ERROR: commit")}
    verdict = f"{len(failed)} commits fail (merges included)" if their.returncode else "OK"
    rows.append((f"doc-checkpoint {base}..HEAD, one run", t, proc.stdout.strip().splitlines()[-1], t2, verdict))

    print("\n| check | rowgate s | rowgate verdict | vllm.cpp s | vllm.cpp | ratio |")
    print("|---|---:|---|---:|---|---:|")
    for name, t_ours, v_ours, t_theirs, v_theirs in rows:
        ratio = f"{t_theirs / t_ours:.2f}x" if t_theirs else ""
        their_t = f"{t_theirs:.2f}" if t_theirs else ""
        print(f"| {name} | {t_ours:.2f} | {v_ours[:90]} | {their_t} | {v_theirs[:60]} | {ratio} |")
    if args.ledger:
        sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared bench helpers beside this file
        from _measure import write_ledger

        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True).stdout.strip()
        write_ledger(
            args.ledger,
            ["GOV-RECORD-SOURCES"],
            f"scripts/bench-checkers.py vllmcpp-records CLONE --commits {args.commits} --reps {args.reps}",
            f"the record checks on vllm.cpp {head[:12]} beside its own scripts; per-matrix counts agree: "
            f"{ours_counts == theirs_counts}; doc-checkpoint verdicts agree on {agree} of {len(shas)} commits",
            {
                "vllmcpp_commit": head,
                "counts": {"rowgate": ours_counts, "vllm.cpp": theirs_counts},
                "rows": [
                    {"check": n, "rowgate_s": round(a, 3), "verdict": v, "vllmcpp_s": b and round(b, 3)}
                    for n, a, v, b, _ in rows
                ],
            },
            figures=[
                {"name": "doc-checkpoint_verdicts_agreeing", "value": agree, "unit": "commits"},
                {"name": "agent-record_rowgate", "value": round(rows[0][1], 2), "unit": "s"},
                {"name": "agent-record_vllmcpp_script", "value": round(rows[0][3], 2), "unit": "s"},
            ],
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
