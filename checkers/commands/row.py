"""`rowgate row new|set`: edit the row records in place (ruamel.yaml round trip, comments and key order
kept), refusing a state its requirements do not allow (checkers.checks.records.rowreqs)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import State
from ..records import Row
from ..results import EXIT_ERROR, EXIT_FAIL, EXIT_PASS, EXIT_USAGE
from ..yamlio import RecordError, parse_yaml, read_yaml, validate, yaml_rt

if TYPE_CHECKING:
    from ..context import Context
    from ..results import Finding

ROW_TEMPLATE = """\
# Roadmap row {id}. Edit with `rowgate row set`; counts are derived, never stored.
id: {id}
area: {area}
title: {title}
state: {state}
anchors: []
spec: .agents/specs/{id}.md
issues: []
claim: null
evidence: []
closing_commit: null
blocker: null
"""


def _reported(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    @functools.wraps(func)
    def wrapper(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except _Handled as exc:
            return exc.code

    return wrapper


class _Handled(Exception):
    """A failure already reported on stderr; `code` is the exit status."""

    def __init__(self, code: int):
        self.code = code


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    p = sub.add_parser(name, help="create a row or change its state (edits .agents/rows/ in place)")
    rs = p.add_subparsers(dest="row_command", metavar="ACTION", required=True)
    n = rs.add_parser("new", help="create .agents/rows/ID.yaml and a spec skeleton")
    n.add_argument("id", help="row id, AREA-NAME")
    n.add_argument("--area", required=True, help="one of rows.areas in .agents/config.yaml")
    n.add_argument("--title", required=True, help="one line")
    n.add_argument("--state", default="INVENTORIED", help="initial state (default INVENTORIED; rows.state_order)")
    n.add_argument("--repo", type=Path, help="repository (default: the one containing the cwd)")
    n.set_defaults(func=cmd_new)
    s = rs.add_parser("set", help="move a row to a state whose requirements it meets")
    s.add_argument("id", help="row id")
    s.add_argument("--state", required=True, help="the new state, one of rows.state_order")
    s.add_argument("--anchor", action="append", default=[], help="add a code or test anchor (path[:line])")
    s.add_argument("--evidence", action="append", default=[], help="add a ledger entry path")
    s.add_argument("--closing-commit", metavar="SHA", help="full sha of the commit that finished the row")
    s.add_argument("--blocker", metavar="REASON", help="why the row is blocked (with --unblock-when)")
    s.add_argument("--unblock-when", metavar="CONDITION", help="the condition that unblocks it")
    s.add_argument("--repo", type=Path, help="repository (default: the one containing the cwd)")
    s.set_defaults(func=cmd_set)


@_reported
def cmd_new(args: argparse.Namespace) -> int:
    ctx = _context(args)
    if ctx is None:
        return EXIT_ERROR
    rows = ctx.config.rows
    if not re.fullmatch(rows.id_pattern, args.id) or args.area not in rows.areas:
        return _refuse(
            f"row id {args.id!r} must be AREA-NAME with AREA one of {rows.areas}"
            if not re.fullmatch(rows.id_pattern, args.id)
            else f"area {args.area!r} is not one of {rows.areas}",
            EXIT_USAGE,
        )
    if args.state not in rows.state_order:
        return _refuse(f"--state {args.state} is not one of {', '.join(rows.state_order)}", EXIT_USAGE)
    if not args.title.strip() or any(ch in args.title for ch in _CONTROL):
        return _refuse(f"title {args.title!r} must be one non-empty line without control characters", EXIT_USAGE)
    path = ctx.root / ".agents" / "rows" / f"{args.id}.yaml"
    spec = ctx.root / ".agents" / "specs" / f"{args.id}.md"
    title = '"' + args.title.replace("\\", "\\\\").replace('"', '\\"') + '"'
    text = ROW_TEMPLATE.format(id=args.id, area=args.area, title=title, state=args.state)
    if os.path.lexists(path):
        return _refuse(f"{ctx.rel(path)} already exists", EXIT_USAGE)
    # Validated (the records loaded) before the lock is taken: the lock is held only for the write.
    doc = _loads(text)
    problems = _requirements(ctx, validate(Row, doc, ctx.rel(path)), args.state, skip_spec=not spec.exists())
    if problems:
        return _refuse_state(args.id, args.state, problems)
    with _transaction(ctx) as txn:
        if os.path.lexists(path):  # re-checked under the lock
            return _refuse(f"{ctx.rel(path)} already exists", EXIT_USAGE)
        # The spec first, the row last: a kill between them leaves no row (a spec alone, which a re-run
        # keeps), never a row without its spec.
        written = []
        if not os.path.lexists(spec):
            sections = "".join(f"## {s}\n\n" for s in ctx.config.rows.spec_sections)
            txn.create(spec, f"# {args.id}: {args.title}\n\n{sections}")
            written.append(ctx.rel(spec))
        txn.create(path, text)
        written.insert(0, ctx.rel(path))
    for rel in written:
        print(f"wrote {rel}")
    return EXIT_PASS


@_reported
def cmd_set(args: argparse.Namespace) -> int:
    ctx = _context(args)
    if ctx is None:
        return EXIT_ERROR
    if (args.blocker is None) != (args.unblock_when is None):
        return _refuse("--blocker and --unblock-when go together", EXIT_USAGE)
    # Read, changed and checked (the records loaded) before the lock; under the lock the row is read again
    # and, when another writer changed it meanwhile, changed and checked again on its new bytes. The lock
    # is held for milliseconds, not for the records' load.
    planned = _plan_set(ctx, args)
    if isinstance(planned, int):
        return planned
    with _transaction(ctx) as txn:
        if _row_bytes(ctx, args.id) != planned[2]:
            planned = _plan_set(ctx, args)
            if isinstance(planned, int):
                return planned
        path, doc, _, released = planned
        txn.write(path, dump_yaml(doc))
        removed: list[tuple[str, str]] = []
        kept: list[tuple[str, str, list[str]]] = []
        if args.state not in ctx.config.rows.active_states:
            # the row's claim, and any orphan claim on this row that an interrupted `claim` left behind
            for cid, loaded in ctx.records.claims.items():
                if (cid == released or args.id in loaded.model.row_ids) and (ctx.root / loaded.path).exists():
                    others = [r for r in loaded.model.row_ids if r != args.id]
                    if others and loaded.path.endswith(".yaml"):
                        # a claim on several rows (imported from a claims table) keeps holding the others
                        txn.write(ctx.root / loaded.path, _without_row(ctx.root / loaded.path, args.id))
                        kept.append((cid, loaded.path, others))
                        continue
                    txn.remove(ctx.root / loaded.path)
                    removed.append((cid, loaded.path))
    print(f"{args.id}: state {args.state} (wrote {ctx.rel(path)})")
    for cid, rel in removed:
        print(f"released claim {cid} (removed {rel})")
    for cid, rel, others in kept:
        print(f"claim {cid} let go of {args.id}; it still holds {', '.join(others)} (wrote {rel})")
    return EXIT_PASS


def _without_row(path: Path, row_id: str) -> str:
    """A multi-row claim file with one row taken out (round trip: comments and key order kept)."""
    from ..yamlio import dump_yaml

    doc = read_yaml(path)
    rows = [r for r in (doc.get("rows") or []) if r != row_id]
    if doc.get("row") == row_id:
        doc["row"] = rows.pop(0) if rows else None
    doc["rows"] = rows
    return dump_yaml(doc)


def _row_bytes(ctx: Context, row_id: str) -> bytes | None:
    from ..boundedio import RECORD_CAP, Unreadable, read_bytes

    try:
        return read_bytes(ctx.root / ".agents" / "rows" / f"{row_id}.yaml", RECORD_CAP, ctx.root)
    except (OSError, Unreadable):
        return None


def _plan_set(ctx: Context, args: argparse.Namespace) -> tuple[Path, Any, bytes | None, str | None] | int:
    """The row `row set` would write: its path, the changed document, the bytes it was read from and the
    claim it releases; or the exit status after saying why not."""
    if args.state not in ctx.config.rows.state_order:
        return _refuse(f"--state {args.state} is not one of {', '.join(ctx.config.rows.state_order)}", EXIT_USAGE)
    raw = _row_bytes(ctx, args.id)
    path, doc = _row_doc(ctx, args.id, raw)
    if doc is None:
        return EXIT_USAGE
    doc["state"] = args.state
    for key, values in (("anchors", args.anchor), ("evidence", args.evidence)):
        for v in values:
            if v not in doc.setdefault(key, []):
                doc[key].append(v)
    if args.closing_commit:
        doc["closing_commit"] = args.closing_commit
    if args.blocker:
        doc["blocker"] = {"reason": args.blocker, "unblock_when": args.unblock_when}
    released = None
    if args.state not in ctx.config.rows.active_states and doc.get("claim"):
        released, doc["claim"] = doc["claim"], None  # a claim lives only while its row is active
    try:
        row = validate(Row, doc, ctx.rel(path))
    except RecordError as exc:
        return _refuse("; ".join(exc.lines()))
    problems = _requirements(ctx, row, args.state)
    if problems:
        return _refuse_state(args.id, args.state, problems)
    return path, doc, raw, released


_CONTROL = {chr(c) for c in range(32)} | {"\x7f"}


def _scalar(value: str) -> str:
    """A YAML double-quoted scalar (branch and owner names come from the user)."""
    return json.dumps(value)


@contextlib.contextmanager
def _transaction(ctx: Context) -> Iterator[Any]:
    """The records transaction, or None (after printing why) when the lock cannot be had. A write that
    fails (a full disk, a read-only tree) is rolled back and reported in one line."""
    from ..atomicio import LockTimeout, describe_os_error, records_transaction

    try:
        with records_transaction(ctx.root / ".agents") as txn:
            yield txn
    except LockTimeout as exc:
        print(f"rowgate: {exc}\n    fix: {exc.hint}", file=sys.stderr)
        raise _Handled(EXIT_ERROR) from None
    except OSError as exc:
        print(f"rowgate: {describe_os_error(exc, exc.filename or ctx.root / '.agents')}", file=sys.stderr)
        raise _Handled(EXIT_ERROR) from None


def _requirements(ctx: Context, row: Row, state: State, skip_spec: bool = False) -> list[Finding]:
    from ..checks.records import rowreqs

    tree = rowreqs.load_tree(ctx.root, ctx.config.rows, ctx.records, ctx.git, extra=[row])
    return rowreqs.row_findings(row, state, tree, skip_spec=skip_spec)


def _row_doc(ctx: Context, row_id: str, raw: bytes | None = None) -> tuple[Path, Any]:
    """The row's document parsed from `raw` (its bytes as read once), or None after saying why not."""
    path = ctx.root / ".agents" / "rows" / f"{row_id}.yaml"
    if not os.path.lexists(path):
        _refuse(f"no row {row_id}: {ctx.rel(path)} does not exist (create it with `rowgate row new`)")
        return path, None
    try:
        return path, read_yaml(path, ctx.rel(path), ctx.root) if raw is None else parse_yaml(raw, ctx.rel(path))
    except RecordError as exc:
        _refuse("; ".join(exc.lines()))
        return path, None


def _context(args: argparse.Namespace) -> Context | None:
    from ..cli import _setup_error, load_context
    from ..gitio import GitError

    try:
        return load_context(args.repo)
    except (GitError, RecordError) as exc:
        _setup_error(exc)
        return None


def _loads(text: str) -> Any:
    return yaml_rt().load(text)


def dump_yaml(doc: Any) -> str:
    """Round-trip dump that writes None as `null`, as the records are written by hand."""
    from io import StringIO

    y = yaml_rt()
    y.representer.add_representer(type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", "null"))
    buf = StringIO()
    y.dump(doc, buf)
    return buf.getvalue()


def _refuse(message: str, code: int = EXIT_FAIL) -> int:
    print(f"rowgate: {message}", file=sys.stderr)
    return code


def _refuse_state(row_id: str, state: str, problems: list[Finding]) -> int:
    lines = [f"rowgate: refusing to move {row_id} to {state}; unmet:"]
    lines += [f"  - {p.message} (fix: {p.hint})" for p in problems]
    print("\n".join(lines), file=sys.stderr)
    return EXIT_FAIL
