"""pr-size against its floor, one `git diff --numstat -z` of the same range, on a generated repository.

Usage: scripts/bench-checkers.py pr-size [--files N] [--lines N] [--reps N] [--ledger PATH]
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared bench helpers beside this file

from _genrepo import generate  # noqa: E402
from _measure import cli, measure, phase, table, write_ledger  # noqa: E402

from checkers import registry
from checkers.config import load_config
from checkers.context import Context
from checkers.gitio import Git
from checkers.preflight import check_parser, run_check

GOAL = 3.0
START = "rowgate --version (start-up and imports alone)"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench-checkers.py pr-size", description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20_000, help="files in the generated repository")
    parser.add_argument("--lines", type=int, default=200_000, help="changed lines (added + deleted)")
    parser.add_argument("--reps", type=int, default=5, help="timed repetitions after a warm-up one")
    parser.add_argument("--ledger", type=Path, help="also write a ledger record (JSON) here")
    parser.add_argument(
        "--allow-dirty", action="store_true", help="write the ledger record from a tree that differs from HEAD"
    )
    args = parser.parse_args(argv)
    spec = registry.get("pr-size")
    with tempfile.TemporaryDirectory(prefix="rowgate-bench-") as tmp:
        gen = phase(
            f"generating {args.files:,} files and a {args.lines:,}-line change",
            lambda: generate(Path(tmp) / "repo", args.files, args.lines),
        )
        root, git = gen.path, Git(gen.path)
        base = git.must_resolve("main")

        def in_process():
            ctx = Context(root=root, config=load_config(root), env={}, notes=io.StringIO())
            return run_check(spec, ctx, check_parser(spec).parse_args(["--base", "main"]))

        result = in_process()
        if result.status.value != "pass":
            print(f"bench: pr-size did not pass on the generated repository: {result.summary}", file=sys.stderr)
            return 1
        arms = {
            "floor: git diff --numstat -z": lambda: git.numstat(base, "HEAD"),
            "pr-size in process (config + check)": in_process,
            START: lambda: cli(["--version"], root),
            "rowgate check pr-size (new interpreter)": lambda: cli(["check", "pr-size", "--base", "main"], root),
        }
        times = measure(arms, args.reps)
    title = (
        f"pr-size on {gen.files:,} files, a {gen.changed_lines:,}-line change over {gen.changed_files:,} files "
        f"(median of {args.reps}, interleaved; goal < {GOAL:g}x the floor)\ncheck said: {result.summary}"
    )
    text, results = table(title, times, "floor: git diff --numstat -z", GOAL, (START,))
    print(text)
    if args.ledger:
        check, start, whole = results[1], results[2], results[3]
        write_ledger(
            args.ledger,
            ["CHECK-PR-SIZE"],
            ".venv/bin/python scripts/bench-checkers.py pr-size",
            f"pr-size runs in {check['ratio']:.2f}x the time of git diff --numstat -z alone on "
            f"{gen.files:,} files and a {gen.changed_lines:,}-line change; as a new rowgate process "
            f"{whole['ratio']:.2f}x, of which start-up and imports take {start['median_s']:.2f}s",
            {
                "files": gen.files,
                "changed_files": gen.changed_files,
                "changed_lines": gen.changed_lines,
                "reps": args.reps,
                "goal_ratio": GOAL,
                "arms": results,
            },
            allow_dirty=args.allow_dirty,
        )
    return 0
