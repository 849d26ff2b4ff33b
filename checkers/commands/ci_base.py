"""`rowgate ci base`: the commit a CI job should judge its range from, and which rule chose it.

The walk, first that applies:
  1. last-green: the last commit the job passed, from a ref (`ci.green_ref`, --green-ref) or a file the job
     updates (`ci.green_file`, --green-file), when it is an ancestor of the head;
  2. push-before: the push event's `before` (--before, else `before` in $GITHUB_EVENT_PATH's JSON; never a
     pull request event's, whose `before` is only its previous head), when it exists here and is an ancestor
     of the head (not a new branch's zero sha, not a force-push's old tip);
  3. merge-base: the merge base of the head with the default branch (--default-branch, else the target
     branch of a pull request, `origin/$GITHUB_BASE_REF`, else base.ref, else the detected upstream).
Never older than the reviewed enforcement floor (`ci.floor`, --floor): a base the floor is not an ancestor of
is replaced by the floor. The sha goes to stdout; the rule, and why each earlier rule did not apply, to
stderr (or all of it as JSON with --format json)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import NamedTuple

from ..context import ZERO_SHA, Context
from ..gitio import GitError
from ..results import EXIT_PASS


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    p = sub.add_parser(name, help="CI helpers: `ci base` prints the base a CI job should judge")
    ci = p.add_subparsers(dest="ci_command", metavar="SUBCOMMAND", required=True)
    b = ci.add_parser("base", help="print the base a CI job should judge, and which rule chose it")
    b.add_argument("--head", metavar="REF", default="HEAD", help="the commit CI judges (default: HEAD)")
    b.add_argument("--green-ref", metavar="REF", help="ref of the last green commit (default: ci.green_ref)")
    b.add_argument("--green-file", metavar="FILE", type=Path, help="file holding the last green sha")
    b.add_argument("--before", metavar="SHA", help="the push event's before (default: from $GITHUB_EVENT_PATH)")
    b.add_argument("--event-path", metavar="FILE", type=Path, help="the event JSON (default: $GITHUB_EVENT_PATH)")
    b.add_argument("--default-branch", metavar="REF", help="the default branch to take the merge base with")
    b.add_argument("--floor", metavar="SHA", help="the reviewed enforcement floor (default: ci.floor)")
    b.add_argument("--format", choices=("text", "json"), default="text")
    b.add_argument("--repo", type=Path, help="repository (default: the one containing the cwd)")
    b.add_argument("--config", type=Path, metavar="PATH", help="the config file")
    b.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..cli import _setup_error, load_context
    from ..results import RecordError

    try:
        ctx = load_context(args.repo, config=args.config)
        choice = walk(ctx, args)
    except (GitError, RecordError) as exc:
        return _setup_error(exc)
    if args.format == "json":
        print(json.dumps(choice._asdict(), indent=2))
    else:
        for line in choice.passed_over:
            print(f"rowgate: ci base: {line}", file=sys.stderr)
        print(f"rowgate: ci base {choice.base[:12]}: {choice.rule} ({choice.why})", file=sys.stderr)
        print(choice.base)
    return EXIT_PASS


class Choice(NamedTuple):
    base: str
    rule: str  # last-green | push-before | merge-base | floor
    why: str
    head: str
    floor: str | None
    passed_over: list[str]  # why each earlier rule did not apply


def walk(ctx: Context, args: argparse.Namespace) -> Choice:
    """The base, the rule that chose it, why, and why each earlier rule did not apply."""
    git, cfg = ctx.git, ctx.config.ci
    head = git.must_resolve(args.head, "head")
    passed: list[str] = []

    def usable(sha: str | None, what: str) -> str | None:
        if not sha or sha == ZERO_SHA:
            passed.append(f"{what}: none")
            return None
        full = git.resolve(f"{sha}^{{commit}}")
        if full is None:
            passed.append(f"{what}: {sha[:12]} is not a commit here")
        elif not git.is_ancestor(full, head):
            passed.append(f"{what}: {full[:12]} is not an ancestor of head {head[:12]}")
        else:
            return full
        return None

    chosen: tuple[str, str, str] | None = None
    green_ref = args.green_ref or cfg.green_ref
    green = usable(green_ref if git.resolve(green_ref) else None, f"last-green ref {green_ref}")
    if green:
        chosen = (green, "last-green", f"ref {green_ref}")
    green_file = args.green_file or (ctx.root / cfg.green_file if cfg.green_file else None)
    if chosen is None and green_file is not None:
        text = _head_of(green_file).split()
        green = usable(text[0] if text else None, f"last-green file {green_file}")
        if green:
            chosen = (green, "last-green", f"file {green_file}")
    if chosen is None:
        before, where = event_before(ctx, args)
        found = usable(before, f"push-before ({where})")
        if found:
            chosen = (found, "push-before", where)
    if chosen is None:
        ref, where = default_branch(ctx, args)
        if ref and git.resolve(ref):
            chosen = (git.merge_base(ref, head), "merge-base", f"with {ref} ({where})")
        else:
            passed.append(f"merge-base: no default branch ({where})")
    if chosen is None:
        raise GitError(
            "no CI base: no last green commit, no push `before`, no default branch",
            hint="pass --default-branch REF (or fetch the default branch), or --before SHA",
        )
    floor_ref = args.floor or cfg.floor
    floor = None
    if floor_ref:
        floor = git.must_resolve(floor_ref, "ci floor")
        if not git.is_ancestor(floor, chosen[0]):
            was = f"{chosen[1]} chose {chosen[0][:12]}, older than the floor"
            chosen = (floor, "floor", f"{was}; the reviewed enforcement floor {floor_ref}")
    return Choice(chosen[0], chosen[1], chosen[2], head, floor, passed)


def _head_of(path: Path, limit: int = 256) -> str:
    """The start of a small file (a sha and a newline): never more than `limit` bytes are read."""
    try:
        with path.open("rb") as f:
            return f.read(limit).decode("utf-8", errors="replace")
    except OSError:
        return ""


def event_before(ctx: Context, args: argparse.Namespace) -> tuple[str | None, str]:
    if args.before:
        return args.before, "--before"
    path = args.event_path or (Path(ctx.env["GITHUB_EVENT_PATH"]) if ctx.env.get("GITHUB_EVENT_PATH") else None)
    if path is None:
        return None, "no --before and no $GITHUB_EVENT_PATH"
    try:
        event = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return None, f"cannot read event {path}: {exc}"
    if isinstance(event, dict) and "pull_request" in event:
        return None, f"event {path} is a pull request's: its whole range is judged"
    before = event.get("before") if isinstance(event, dict) else None
    return (before if isinstance(before, str) else None), f"event {path}"


def default_branch(ctx: Context, args: argparse.Namespace) -> tuple[str | None, str]:
    if args.default_branch:
        return args.default_branch, "--default-branch"
    if ctx.env.get("GITHUB_BASE_REF"):
        return f"origin/{ctx.env['GITHUB_BASE_REF']}", "the pull request's target, $GITHUB_BASE_REF"
    if ctx.config.base.ref:
        return ctx.config.base.ref, "config base.ref"
    return ctx.git.default_upstream(ctx.config.base.remote), "the detected upstream"
