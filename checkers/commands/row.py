"""`rowgate row new|set`: edit the row records in place (ruamel.yaml round trip, comments and key order
kept), refusing a state its requirements do not allow (checkers.checks.records.rowreqs)."""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from checkers.config import STATES
from checkers.records import ROW_ID, Row
from checkers.results import EXIT_ERROR, EXIT_FAIL, EXIT_PASS, EXIT_USAGE
from checkers.yamlio import RecordError, read_yaml, validate, yaml_rt

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


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(name, help="create a row or change its state (edits .agents/rows/ in place)")
    rs = p.add_subparsers(dest="row_command", metavar="ACTION", required=True)
    n = rs.add_parser("new", help="create .agents/rows/ID.yaml and a spec skeleton")
    n.add_argument("id", help="row id, AREA-NAME")
    n.add_argument("--area", required=True, help="one of rows.areas in .agents/config.yaml")
    n.add_argument("--title", required=True, help="one line")
    n.add_argument("--state", default="INVENTORIED", choices=STATES, help="initial state (default INVENTORIED)")
    n.add_argument("--repo", type=Path, help="repository (default: the one containing the cwd)")
    n.set_defaults(func=cmd_new)
    s = rs.add_parser("set", help="move a row to a state whose requirements it meets")
    s.add_argument("id", help="row id")
    s.add_argument("--state", required=True, choices=STATES, help="the new state")
    s.add_argument("--anchor", action="append", default=[], help="add a code or test anchor (path[:line])")
    s.add_argument("--evidence", action="append", default=[], help="add a ledger entry path")
    s.add_argument("--closing-commit", metavar="SHA", help="full sha of the commit that finished the row")
    s.add_argument("--blocker", metavar="REASON", help="why the row is blocked (with --unblock-when)")
    s.add_argument("--unblock-when", metavar="CONDITION", help="the condition that unblocks it")
    s.add_argument("--repo", type=Path, help="repository (default: the one containing the cwd)")
    s.set_defaults(func=cmd_set)


def cmd_new(args: argparse.Namespace) -> int:
    ctx = _context(args)
    if ctx is None:
        return EXIT_ERROR
    if not re.match(ROW_ID, args.id) or args.area not in ctx.config.rows.areas:
        return _refuse(f"row id {args.id!r} must be AREA-NAME with AREA one of {ctx.config.rows.areas}"
                       if not re.match(ROW_ID, args.id) else
                       f"area {args.area!r} is not one of {ctx.config.rows.areas}", EXIT_USAGE)
    path = ctx.root / ".agents" / "rows" / f"{args.id}.yaml"
    if path.exists():
        return _refuse(f"{ctx.rel(path)} already exists", EXIT_USAGE)
    title = '"' + args.title.replace("\\", "\\\\").replace('"', '\\"') + '"'
    text = ROW_TEMPLATE.format(id=args.id, area=args.area, title=title, state=args.state)
    doc = _loads(text)
    spec = ctx.root / ".agents" / "specs" / f"{args.id}.md"
    problems = _requirements(ctx, validate(Row, doc, ctx.rel(path)), args.state, skip_spec=not spec.exists())
    if problems:
        return _refuse_state(args.id, args.state, problems)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"wrote {ctx.rel(path)}")
    if not spec.exists():
        sections = "".join(f"## {s}\n\n" for s in ctx.config.rows.spec_sections)
        spec.parent.mkdir(parents=True, exist_ok=True)
        spec.write_text(f"# {args.id}: {args.title}\n\n{sections}", encoding="utf-8")
        print(f"wrote {ctx.rel(spec)}")
    return EXIT_PASS


def cmd_set(args: argparse.Namespace) -> int:
    ctx = _context(args)
    if ctx is None:
        return EXIT_ERROR
    path, doc = _row_doc(ctx, args.id)
    if doc is None:
        return EXIT_USAGE
    if (args.blocker is None) != (args.unblock_when is None):
        return _refuse("--blocker and --unblock-when go together", EXIT_USAGE)
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
    path.write_text(dump_yaml(doc), encoding="utf-8")
    print(f"{args.id}: state {args.state} (wrote {ctx.rel(path)})")
    if released and released in ctx.records.claims:
        claim_path = ctx.root / ctx.records.claims[released].path
        claim_path.unlink()
        print(f"released claim {released} (removed {ctx.rel(claim_path)})")
    return EXIT_PASS


def _requirements(ctx, row: Row, state: str, skip_spec: bool = False) -> list:
    from checkers.checks.records import rowreqs

    tree = rowreqs.load_tree(ctx.root, ctx.config.rows, ctx.records, ctx.git, extra=[row])
    return rowreqs.row_findings(row, state, tree, skip_spec=skip_spec)


def _row_doc(ctx, row_id: str):
    path = ctx.root / ".agents" / "rows" / f"{row_id}.yaml"
    if not path.is_file():
        _refuse(f"no row {row_id}: {ctx.rel(path)} does not exist (create it with `rowgate row new`)")
        return path, None
    try:
        return path, read_yaml(path, ctx.rel(path))
    except RecordError as exc:
        _refuse("; ".join(exc.lines()))
        return path, None


def _context(args: argparse.Namespace):
    from checkers.cli import _setup_error, load_context
    from checkers.gitio import GitError

    try:
        return load_context(args.repo)
    except (GitError, RecordError) as exc:
        _setup_error(exc)
        return None


def _loads(text: str):
    return yaml_rt().load(text)


def dump_yaml(doc) -> str:
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


def _refuse_state(row_id: str, state: str, problems: list) -> int:
    lines = [f"rowgate: refusing to move {row_id} to {state}; unmet:"]
    lines += [f"  - {p.message} (fix: {p.hint})" for p in problems]
    print("\n".join(lines), file=sys.stderr)
    return EXIT_FAIL
