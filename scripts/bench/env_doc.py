"""env-doc against its floor, listing and reading every tracked source file once, on a generated repository.

Usage: scripts/bench-checkers.py env-doc [--files N] [--reps N] [--ledger PATH]
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared bench helpers beside this file

from _genrepo import generate  # noqa: E402
from _measure import cli, measure, phase, table, write_ledger  # noqa: E402

from checkers import registry
from checkers.checks.env_doc.envscan import C_SUFFIXES, PYTHON_SUFFIXES
from checkers.config import load_config
from checkers.context import Context
from checkers.gitio import Git
from checkers.preflight import check_parser, run_check

GOAL = 3.0
START = "rowgate --version (start-up and imports alone)"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench-checkers.py env-doc", description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20_000, help="files in the generated repository")
    parser.add_argument("--reps", type=int, default=5, help="timed repetitions after a warm-up one")
    parser.add_argument("--ledger", type=Path, help="also write a ledger record (JSON) here")
    parser.add_argument(
        "--allow-dirty", action="store_true", help="write the ledger record from a tree that differs from HEAD"
    )
    args = parser.parse_args(argv)
    spec = registry.get("env-doc")
    with tempfile.TemporaryDirectory(prefix="rowgate-bench-") as tmp:
        gen = phase(f"generating {args.files:,} files", lambda: generate(Path(tmp) / "repo", args.files))
        root, git = gen.path, Git(gen.path)

        def floor() -> int:
            total = 0
            for p in git.ls_files():
                if p.endswith(PYTHON_SUFFIXES + C_SUFFIXES):
                    with open(os.path.join(root, p), "rb") as f:
                        total += len(f.read())
            return total

        def in_process():
            ctx = Context(root=root, config=load_config(root), env={}, notes=io.StringIO())
            return run_check(spec, ctx, check_parser(spec).parse_args([]))

        result = in_process()
        if result.status.value != "pass":
            print(f"bench: env-doc did not pass on the generated repository: {result.summary}", file=sys.stderr)
            return 1
        arms = {
            "floor: git ls-files + read each source once": floor,
            "env-doc in process (config + check)": in_process,
            START: lambda: cli(["--version"], root),
            "rowgate check env-doc (new interpreter)": lambda: cli(["check", "env-doc"], root),
        }
        times = measure(arms, args.reps)
    title = (
        f"env-doc on {gen.files:,} files ({result.examined:,} Python and C-family sources, "
        f"{gen.env_names} VT_* names) (median of {args.reps}, interleaved; goal < {GOAL:g}x the floor)\n"
        f"check said: {result.summary}"
    )
    text, results = table(title, times, "floor: git ls-files + read each source once", GOAL, (START,))
    print(text)
    if args.ledger:
        check, start, whole = results[1], results[2], results[3]
        write_ledger(
            args.ledger,
            ["CHECK-ENV-DOC"],
            ".venv/bin/python scripts/bench-checkers.py env-doc",
            f"env-doc runs in {check['ratio']:.2f}x the time of reading every tracked source once on "
            f"{gen.files:,} files; as a new rowgate process {whole['ratio']:.2f}x, of which start-up and "
            f"imports take {start['median_s']:.2f}s",
            {
                "files": gen.files,
                "sources": result.examined,
                "env_names": gen.env_names,
                "reps": args.reps,
                "goal_ratio": GOAL,
                "arms": results,
            },
            allow_dirty=args.allow_dirty,
        )
    return 0
