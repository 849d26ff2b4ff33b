"""`rowgate records import`: the rows and claims of the configured markdown tables into one record file
each (.agents/rows/ID.yaml, .agents/claims/ID.yaml), every cell kept under `table:` for `rowgate render
--tables` to write the tables back."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..results import EXIT_ERROR, EXIT_FAIL, EXIT_PASS, EXIT_USAGE


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    p = sub.add_parser(name, help="import the rows and claims of markdown record tables into record files")
    rs = p.add_subparsers(dest="records_command", metavar="ACTION", required=True)
    i = rs.add_parser(
        "import",
        help="write .agents/rows/ID.yaml and .agents/claims/ID.yaml from the tables named in `sources:`",
        description="Read the markdown tables of `sources.rows` and `sources.claims` and write one record "
        "file per line, keeping every cell (mapped or not) under `table:`. A malformed or invalid line is "
        "reported and skipped. Afterwards set `imported: true` on each table source: the record files are "
        "then read, and `rowgate render --tables` writes the tables back.",
    )
    i.add_argument("--dry-run", action="store_true", help="print what would be written; write nothing")
    i.add_argument("--force", action="store_true", help="overwrite record files that already exist")
    i.add_argument("--repo", type=Path, help="repository (default: the one containing the cwd)")
    i.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..atomicio import LockTimeout, describe_os_error, records_transaction
    from ..cli import _setup_error, load_context
    from ..gitio import GitError
    from ..paths import OutsideRepo, confine
    from ..recordsources.migrate import imports, record_text
    from ..yamlio import RecordError

    try:
        ctx = load_context(args.repo)
    except (GitError, RecordError) as exc:
        return _setup_error(exc)
    sources = ctx.config.sources
    if not any(s.tables for s in (sources.rows, sources.claims)):
        print("rowgate: no row or claim tables in `sources:` of the config; nothing to import", file=sys.stderr)
        return EXIT_USAGE
    try:
        with records_transaction(ctx.root / ".agents") as txn:
            result = imports(ctx.root, ctx.config)
            for problem in result.problems:
                for line, fld, message in problem.problems:
                    where = f"{problem.path}:{line}" if line else problem.path
                    print(f"{where}: skipped: {f'{fld}: ' if fld else ''}{message}", file=sys.stderr)
            targets = [
                (item, confine(ctx.root, f".agents/{item.kind}/{item.record.id}.yaml")) for item in result.records
            ]
            taken = [ctx.rel(path) for _, path in targets if path.exists()]
            if taken and not args.force:
                print(
                    f"rowgate: {len(taken)} record file(s) exist ({', '.join(taken[:5])}"
                    f"{', ...' if len(taken) > 5 else ''}); nothing written. Pass --force to overwrite them.",
                    file=sys.stderr,
                )
                return EXIT_FAIL
            verb = "would write" if args.dry_run else "wrote"
            for item, path in targets:
                if not args.dry_run:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    txn.write(path, record_text(item))
                print(f"{verb} {ctx.rel(path)} ({item.path}:{item.line})")
    except (RecordError, OutsideRepo, LockTimeout) as exc:
        return _setup_error(exc)
    except OSError as exc:
        print(f"rowgate: {describe_os_error(exc, exc.filename or ctx.root)}", file=sys.stderr)
        return EXIT_ERROR
    rows = sum(1 for item in result.records if item.kind == "rows")
    skipped = sum(len(p.problems) for p in result.problems)
    print(
        f"{'dry run: ' if args.dry_run else ''}{rows} rows and {len(result.records) - rows} claims from "
        f"{len(result.tables)} table files; {skipped} line(s) skipped"
    )
    if not args.dry_run and result.records:
        print(
            "next: set `imported: true` on each table source in `sources:` (the record files are read from then "
            "on), then `rowgate render --tables --check` shows the round trip"
        )
    return EXIT_FAIL if skipped else EXIT_PASS
