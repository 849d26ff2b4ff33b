"""The preflight and each record command on this repository's own records, against a floor in the same run.

Usage: scripts/bench-checkers.py records [--reps N] [--ledger PATH]

A pre-commit gate should answer in about a second. The arms run this checkout's code as a user runs it (a new
interpreter each, `python -P` so the clone's own copy of the toolkit is not imported) in a shared clone of
HEAD, where `row set` may write: the floor is a bare interpreter start (`python -c pass`), with
`git rev-parse HEAD` beside it as a reference. The preflight and agent-record also run with rowgate's caches
under .git removed first (the first run in a fresh clone), and the warm-over-cold speed-up is printed from
the same run's medians.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared bench helpers beside this file

from _measure import REPO_ROOT, measure, phase, table, write_ledger  # noqa: E402

FLOOR = "floor: python -c pass (a bare interpreter)"
GIT = "git rev-parse HEAD (reference)"
# The same commands with no cache under .git (rowgate/: the config, the records' and the scans' content
# caches, the valid ledger records): what the first run in a fresh clone pays, and what the caches save.
COLD_PREFLIGHT = "rowgate preflight, no caches (ref)"
COLD_RECORD = "rowgate check agent-record, no caches (ref)"
GOAL_S = 1.0  # "about a second": held as a ratio to this run's bare interpreter, as every bench here is


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench-checkers.py records", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions after a warm-up one")
    parser.add_argument("--row", default="GOV-ADOPT-MERGES", help="the row `row set` rewrites (to its own state)")
    parser.add_argument("--ledger", type=Path, help="also write a ledger record (JSON) here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rowgate-bench-") as tmp:
        clone = Path(tmp) / "repo"
        phase("cloning HEAD (shared objects)", lambda: _clone(clone))
        state = _state(clone / ".agents" / "rows" / f"{args.row}.yaml")
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}

        def rowgate(*cmd: str) -> object:
            return lambda: _run([sys.executable, "-P", "-m", "checkers", *cmd], clone, env)

        def cold(*cmd: str) -> object:
            """The command as the first run in a fresh clone: every cache rowgate keeps under .git removed."""

            def run() -> object:
                shutil.rmtree(clone / ".git" / "rowgate", ignore_errors=True)
                return _run([sys.executable, "-P", "-m", "checkers", *cmd], clone, env)

            return run

        arms = {
            FLOOR: lambda: _run([sys.executable, "-c", "pass"], clone, env),
            GIT: lambda: _run(["git", "rev-parse", "HEAD"], clone, env),
            COLD_PREFLIGHT: cold("preflight"),
            "rowgate preflight": rowgate("preflight"),
            COLD_RECORD: cold("check", "agent-record"),
            "rowgate check agent-record": rowgate("check", "agent-record"),
            "rowgate render --check": rowgate("render", "--check"),
            f"rowgate row set {args.row} --state {state}": rowgate("row", "set", args.row, "--state", state),
            "scripts/audit-live-rows.py": lambda: _run(
                [sys.executable, str(REPO_ROOT / "scripts" / "audit-live-rows.py")], clone, env
            ),
        }
        for name, fn in arms.items():  # each arm must work before it is timed: a failing command is fast
            proc = fn()
            assert isinstance(proc, subprocess.CompletedProcess)
            if proc.returncode not in (0,) and not name.startswith("rowgate preflight"):
                print(f"bench: {name} exited {proc.returncode}:\n{proc.stderr.decode()[-2000:]}", file=sys.stderr)
                return 1
        times = measure(arms, args.reps)
        ledger = len(list((clone / ".agents" / "ledger").glob("*.json")))
    goal = round(GOAL_S / statistics.median(times[FLOOR]), 1)
    title = (
        f"the preflight and the record commands on this repository ({ledger} ledger records) "
        f"(median of {args.reps}, interleaved; goal about {GOAL_S:g} s = {goal:g}x this run's bare interpreter; "
        f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
    )
    text, results = table(title, times, FLOOR, goal, (GIT, COLD_PREFLIGHT, COLD_RECORD))
    print(text)
    speedups = {}
    for warm, cold_arm in (("rowgate preflight", COLD_PREFLIGHT), ("rowgate check agent-record", COLD_RECORD)):
        speedups[warm] = round(statistics.median(times[cold_arm]) / statistics.median(times[warm]), 2)
        print(f"caches: {warm} {speedups[warm]:.2f}x faster warm than cold (medians, same run)")
    if args.ledger:
        by = {r["arm"]: r for r in results}
        write_ledger(
            args.ledger,
            ["GOV-ADOPT-MERGES"],
            ".venv/bin/python scripts/bench-checkers.py records",
            f"preflight {by['rowgate preflight']['median_s']:.2f}s "
            f"({by['rowgate preflight']['ratio']:.1f}x a bare interpreter); agent-record "
            f"{by['rowgate check agent-record']['median_s']:.2f}s; warm over cold "
            f"{speedups['rowgate preflight']:.2f}x (preflight), {speedups['rowgate check agent-record']:.2f}x "
            "(agent-record)",
            {
                "reps": args.reps,
                "ledger_records": ledger,
                "goal_ratio": goal,
                "arms": results,
                "warm_over_cold_speedup": speedups,
            },
        )
    return 0


def _clone(dest: Path) -> None:
    subprocess.run(["git", "clone", "-q", "--shared", str(REPO_ROOT), str(dest)], check=True)
    subprocess.run(["git", "checkout", "-q", "-B", "main"], cwd=dest, check=True)  # base.ref main: an empty range


def _state(row: Path) -> str:
    for line in row.read_text(encoding="utf-8").splitlines():
        if line.startswith("state:"):
            return line.split(":", 1)[1].strip()
    raise SystemExit(f"bench: no state in {row}")


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, timeout=600, check=False)
