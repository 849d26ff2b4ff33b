"""`rowgate render [--check]`: write the public views from the records, or fail with a diff when stale."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..atomicio import Transaction
from ..paths import confine
from ..records import load_records
from ..render import load_views, stale_views
from ..results import EXIT_ERROR, EXIT_FAIL, EXIT_PASS

if TYPE_CHECKING:
    from ..context import Context


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
    from ..atomicio import LockTimeout, describe_os_error, records_lock
    from ..cli import _setup_error, load_context
    from ..flagdecls import FlagDeclError
    from ..gitio import GitError
    from ..paths import OutsideRepo
    from ..yamlio import RecordError

    try:
        ctx = load_context(args.repo)
    except (GitError, RecordError) as exc:
        return _setup_error(exc)
    # Writing holds the records lock from reading the records to the last rename, so the views written are
    # those of one state of .agents/ (a concurrent `row set` waits); --check writes nothing and takes none.
    lock = contextlib.nullcontext() if args.check else records_lock(ctx.root / ".agents")
    try:
        with lock:
            return _render(ctx, args.check)
    except (RecordError, FlagDeclError, OutsideRepo, LockTimeout) as exc:
        return _setup_error(exc)
    except OSError as exc:
        print(f"rowgate: {describe_os_error(exc, exc.filename or ctx.root)}", file=sys.stderr)
        return EXIT_ERROR


def _render(ctx: Context, check: bool) -> int:
    records = load_records(ctx.root, ctx.config)
    views = load_views(ctx.root, records, ctx.config)
    if records.problems:
        print(
            f"rowgate: {len(records.problems)} record(s) do not validate; run `rowgate check agent-record` first",
            file=sys.stderr,
        )
        return EXIT_ERROR
    stale = stale_views(ctx.root, views)
    if check:
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
    # Each file is replaced by a complete twin (a kill leaves the old or the new file), and the set is one
    # transaction: a write that fails puts back the files already written.
    txn = Transaction()
    try:
        for rel in stale:
            txn.write(confine(ctx.root, rel), views[rel])
    except BaseException:
        txn.rollback()
        raise
    for rel in stale:
        print(f"wrote {rel}")
    print(f"OK: {len(views)} rendered files, {len(stale)} updated")
    return EXIT_PASS
