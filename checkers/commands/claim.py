"""`rowgate claim`: write a claim record and make its row active, refusing what the row's state does not
allow (checkers.checks.records.rowreqs, as `rowgate row set`)."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from pathlib import Path

from ..commands.row import (
    _context,
    _loads,
    _refuse,
    _refuse_state,
    _reported,
    _requirements,
    _row_doc,
    _scalar,
    _transaction,
    dump_yaml,
)
from ..context import Context
from ..records import Claim, Loaded, Row
from ..results import EXIT_ERROR, EXIT_PASS, EXIT_USAGE
from ..yamlio import RecordError, validate


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    p = sub.add_parser(name, help="claim a row: write .agents/claims/ID.yaml and make the row active")
    p.add_argument("id", help="row id")
    p.add_argument("--branch", required=True, help="the branch the work happens on (row/<ID> by convention)")
    p.add_argument(
        "--owner", help="who works on it (default: $ROWGATE_OWNER, then git's user.name, then the login name)"
    )
    p.add_argument("--claim-id", help="claim id (default: the row id)")
    p.add_argument(
        "--state",
        default="ACTIVE",
        help="active state to move a non-active row to (default ACTIVE; rows.active_states)",
    )
    p.add_argument("--repo", type=Path, help="repository (default: the one containing the cwd)")
    p.set_defaults(func=cmd_claim)


def _default_owner(ctx: Context) -> str | None:
    """Who runs the command, as git names them (user.name, from the user's own config too), else the login
    name ($LOGNAME, $USER, then the password database): a container or CI job often has no $USER."""
    import getpass
    import subprocess

    try:
        name = subprocess.run(
            ["git", "config", "user.name"], cwd=ctx.root, capture_output=True, text=True, timeout=30, check=False
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        name = ""
    if name:
        return name
    try:
        return getpass.getuser() or None
    except (OSError, KeyError):  # no login name and no password entry for the uid
        return None


@_reported
def cmd_claim(args: argparse.Namespace) -> int:
    ctx = _context(args)
    if ctx is None:
        return EXIT_ERROR
    owner = args.owner or os.environ.get("ROWGATE_OWNER") or _default_owner(ctx)
    if not owner:
        return _refuse("no owner: pass --owner NAME (or set $ROWGATE_OWNER)", EXIT_USAGE)
    if args.state not in ctx.config.rows.active_states:
        return _refuse(
            f"--state {args.state} is not an active state ({', '.join(ctx.config.rows.active_states)})", EXIT_USAGE
        )
    claim_id = args.claim_id or args.id
    claim_path = ctx.root / ".agents" / "claims" / f"{claim_id}.yaml"
    text = (
        f"# Claim on row {args.id}: who works on it, and where.\nid: {claim_id}\nrow: {args.id}\n"
        f"branch: {_scalar(args.branch)}\nowner: {_scalar(owner)}\nsince: {dt.date.today().isoformat()}\n"
    )
    from ruamel.yaml.error import YAMLError  # here, not at import: every rowgate command imports this module

    try:
        claim = validate(Claim, _loads(text), ctx.rel(claim_path))
    except (RecordError, YAMLError) as exc:
        return _refuse(f"bad claim: {exc}", EXIT_USAGE)
    ctx.records  # noqa: B018 -- loaded before the lock, which is held only for the check and the write
    with _transaction(ctx) as txn:  # one claim per row: checked and created under the records lock
        path, doc = _row_doc(ctx, args.id)
        if doc is None:
            return EXIT_USAGE
        if doc.get("claim"):
            return _refuse(
                f"{args.id} is already claimed ({doc.get('claim')}); "
                f"release it with `rowgate row set {args.id} --state READY` first"
            )
        existing = ctx.records.claims.get(claim_id)
        if claim_path.exists() and (existing is None or args.id not in existing.model.row_ids):
            return _refuse(f"claim id {claim_id} is taken ({ctx.rel(claim_path)}); pass another --claim-id")
        orphans = [loaded for loaded in ctx.records.claims.values() if args.id in loaded.model.row_ids]
        state = doc["state"] if doc["state"] in ctx.config.rows.active_states else args.state
        doc["claim"], doc["state"] = claim_id, state
        row = validate(Row, doc, ctx.rel(path))
        ctx.records.claims[claim_id] = Loaded(ctx.rel(claim_path), claim)
        problems = _requirements(ctx, row, state)
        if problems:
            return _refuse_state(args.id, state, problems)
        for loaded in orphans:  # a claim file no row points at, left by an interrupted claim
            txn.remove(ctx.root / loaded.path)
            print(f"removed orphan claim {loaded.path}", file=sys.stderr)
        txn.create(claim_path, text)
        txn.write(path, dump_yaml(doc))
    print(f"{args.id}: claimed as {claim_id} by {owner} on {args.branch}; state {state}")
    return EXIT_PASS
