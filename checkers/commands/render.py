"""`rowgate render [--check]`: write the public views from the records, or fail with a diff when stale."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..records import load_records
from ..render import load_views, stale_views
from ..results import EXIT_ERROR, EXIT_FAIL, EXIT_PASS


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    p = sub.add_parser(
        name,
        help="render docs/matrices/, docs/ROADMAP.md and docs/ENVIRONMENT.md from the records",
        description="Render the area matrices, the roadmap table and the environment table "
        "from .agents/ and the engine's flag registry.",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="write nothing; fail (exit 1) with a diff when a rendered file is out of date",
    )
    p.add_argument("--repo", type=Path, help="repository (default: the one containing the cwd)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..cli import _setup_error, load_context
    from ..flagdecls import FlagDeclError
    from ..gitio import GitError
    from ..yamlio import RecordError

    try:
        ctx = load_context(args.repo)
        records = load_records(ctx.root)
        views = load_views(ctx.root, records, ctx.config)
    except (GitError, RecordError, FlagDeclError) as exc:
        return _setup_error(exc)
    if records.problems:
        print(
            f"rowgate: {len(records.problems)} record(s) do not validate; run `rowgate check agent-record` first",
            file=sys.stderr,
        )
        return EXIT_ERROR
    stale = stale_views(ctx.root, views)
    if args.check:
        for diff in stale.values():
            sys.stdout.write(diff if diff.endswith("\n") else diff + "\n")
        if stale:
            print(
                f"rowgate: {len(stale)} of {len(views)} rendered files are out of date: "
                f"{', '.join(stale)}; run `rowgate render`",
                file=sys.stderr,
            )
            return EXIT_FAIL
        print(f"OK: {len(views)} rendered files are up to date")
        return EXIT_PASS
    for rel in stale:
        path = ctx.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(views[rel], encoding="utf-8")
        print(f"wrote {rel}")
    print(f"OK: {len(views)} rendered files, {len(stale)} updated")
    return EXIT_PASS
