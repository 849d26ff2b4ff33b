"""`rowgate render [--check] [--tables]`: write the public views from the records, or fail with a diff when
stale. Markdown record tables whose records were imported into record files (`imported: true` in
`sources:`) are views too: their record lines are written back from the record files."""

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
from ..results import EXIT_ERROR, EXIT_FAIL, EXIT_PASS, EXIT_USAGE

if TYPE_CHECKING:
    from ..context import Context
    from ..records import Records
    from ..recordsources.migrate import Rendered


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
    p.add_argument(
        "--tables",
        action="store_true",
        help="only the imported markdown record tables (`imported: true` in `sources:`), not the other views",
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
            return _render(ctx, args.check, args.tables)
    except (RecordError, FlagDeclError, OutsideRepo, LockTimeout) as exc:
        return _setup_error(exc)
    except OSError as exc:
        print(f"rowgate: {describe_os_error(exc, exc.filename or ctx.root)}", file=sys.stderr)
        return EXIT_ERROR


def _render(ctx: Context, check: bool, tables_only: bool = False) -> int:
    records = load_records(ctx.root, ctx.config)
    views = {} if tables_only else load_views(ctx.root, records, ctx.config)
    sources = ctx.config.sources
    imported = any(t.imported for kind in (sources.rows, sources.claims) for t in kind.tables)
    if tables_only and not imported:
        print("rowgate: no table source has `imported: true`; run `rowgate records import` first", file=sys.stderr)
        return EXIT_USAGE
    tables = _tables(ctx, records, views) if imported else {}
    if records.problems:
        print(
            f"rowgate: {len(records.problems)} record(s) do not validate; run `rowgate check agent-record` first",
            file=sys.stderr,
        )
        return EXIT_ERROR
    stale = stale_views(ctx.root, views)
    for rel, table in tables.items():
        views[rel] = table.new
        if table.new != table.old:
            stale[rel] = _diff(rel, table.old, table.new)
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


def _tables(ctx: Context, records: Records, views: dict[str, str]) -> dict[str, Rendered]:
    """The imported record tables written back from the record files; what could not be carried over is
    printed on stderr (a line without a record, a cell that cannot show a changed field)."""
    from ..recordsources.migrate import render_tables

    tables = render_tables(ctx.root, ctx.config, {"rows": records.rows, "claims": records.claims})
    for rel, table in tables.items():
        if rel in views:
            raise OSError(f"{rel} is both a rendered view and a record table")
        for note in table.notes:
            print(f"note: {note}", file=sys.stderr)
    return tables


def _diff(rel: str, old: str, new: str) -> str:
    import difflib

    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{rel}", f"b/{rel}", n=1
    )
    return "".join(lines)
