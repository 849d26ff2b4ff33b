"""evidence against its floor on this repository: reading every ledger record and the cited documents once,
and the one read of the history that staleness needs.

Usage: scripts/bench-checkers.py evidence [--reps N] [--ledger PATH] [--allow-dirty]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared bench helpers beside this file

from _measure import REPO_ROOT, cli, measure, table, write_ledger  # noqa: E402

from checkers import registry
from checkers.config import load_config
from checkers.context import Context
from checkers.gitio import Git
from checkers.preflight import check_parser, run_check

GOAL_S = 1.0  # the bound on the whole CLI, in seconds
FLOOR = "floor: json-read each record, the documents, git log once"
START = "rowgate --version (start-up and imports alone)"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench-checkers.py evidence", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9, help="timed repetitions after a warm-up one")
    parser.add_argument("--ledger", type=Path, help="also write a ledger record (JSON) here")
    parser.add_argument(
        "--allow-dirty", action="store_true", help="write the ledger record from a tree that differs from HEAD"
    )
    args = parser.parse_args(argv)
    root, spec = REPO_ROOT, registry.get("evidence")
    cfg = load_config(root)

    def floor() -> int:
        total = 0
        for entry in os.scandir(root / cfg.evidence.ledger_dir):
            if entry.name.endswith(".json"):
                with open(entry.path, "rb") as f:
                    total += len(json.loads(f.read()))
        for doc in cfg.evidence.documents:
            total += len((root / doc).read_text())
        return total + len(Git(root).text("log", "--format=%H%x01%P%x01%s", "HEAD"))

    def in_process():
        ctx = Context(root=root, config=load_config(root), env={}, notes=io.StringIO())
        return run_check(spec, ctx, check_parser(spec).parse_args([]))

    result = in_process()
    if result.status.value != "pass":
        print(f"bench: evidence did not pass on this repository: {result.summary}", file=sys.stderr)
        return 1
    arms = {
        FLOOR: floor,
        "evidence in process (config + check)": in_process,
        START: lambda: cli(["--version"], root),
        "rowgate check evidence (new interpreter)": lambda: cli(["check", "evidence"], root),
    }
    times = measure(arms, args.reps)
    title = (
        f"evidence on this repository (median of {args.reps}, interleaved; load {os.getloadavg()[0]:.1f})\n"
        f"check said: {result.summary}"
    )
    text, results = table(title, times, FLOOR, float("inf"), (START,))
    whole = results[3]
    verdict = "met" if whole["median_s"] < GOAL_S else "not met"
    print(text)
    print(f"whole CLI median {whole['median_s']:.3f}s (goal < {GOAL_S:g}s: {verdict})")
    if args.ledger:
        write_ledger(
            args.ledger,
            ["GOV-EVIDENCE"],
            ".venv/bin/python scripts/bench-checkers.py evidence " + shlex.join(argv),
            f"rowgate check evidence on this repository: {whole['median_s']:.3f}s whole CLI median "
            f"(goal < {GOAL_S:g}s: {verdict}); in process {results[1]['ratio']:.2f}x its floor; {result.summary}",
            {"reps": args.reps, "arms": results, "check": result.summary},
            figures=[
                {"name": "cli_median_s", "value": whole["median_s"], "unit": "s"},
                {"name": "in_process_ratio", "value": results[1]["ratio"], "unit": "x"},
            ],
            allow_dirty=args.allow_dirty,
        )
    return 0
