"""Pending commits: those of a range not yet on the protected branch. A branch's record checks judge it
from its merge base with the protected branch (never from the config cutover, which would judge the
upstream's commits too), and role-discipline has a path for a pending commit of an outside contribution.

The protected branch is `role.protected` (its name, `main`), its tip `role.protected_ref` (unset: the
config's base.ref, else the detected upstream). A run is a *landing* (judged as today, nothing pending)
when the branch checked out is the protected one, or a push or CI job updates it."""

from __future__ import annotations

import argparse
import re

from ...context import Context, Range


def protected_ref(ctx: Context) -> str | None:
    """The ref holding the protected branch's tip: the first of role.protected_ref, base.ref and the detected
    upstream that resolves here (a CI checkout of a pull request has `origin/main` but no local `main`)."""
    for ref in (ctx.config.role.protected_ref, ctx.config.base.ref):
        if ref and ctx.git.resolve(ref):
            return ref
    return ctx.git.default_upstream(ctx.config.base.remote)


def landing(ctx: Context) -> bool:
    """The run judges the protected branch itself: it is checked out, pushed to, or CI runs on it."""
    name = ctx.config.role.protected
    full = f"refs/heads/{name}"
    pushed = ctx.env.get("PRE_COMMIT_REMOTE_BRANCH")
    return ctx.git.current_branch() == name or pushed == full or ctx.env.get("GITHUB_REF") == full


def record_range(ctx: Context, args: argparse.Namespace, since: str | None, since_source: str) -> Range:
    """The range a record check judges. On a branch (no --base, no $ROWGATE_BASE, not a push, HEAD not on
    the protected branch), it starts at the merge base with the protected branch; otherwise as every
    range (Context.range), from the cutover when nothing else names a base."""
    head = getattr(args, "head", None)
    if args.base is None and not ctx.env.get(ctx.config.base.env) and not ctx.pushing and ctx.config.role.pending:
        ref = protected_ref(ctx)
        if ref is not None and not landing(ctx):
            head_sha = ctx.git.must_resolve(head or "HEAD", "head")
            if not ctx.git.is_ancestor(head_sha, ctx.git.must_resolve(ref)):
                return ctx.range(ref, head, flag=f"a branch: its merge base with {ref}")
    return ctx.range(args.base, head, since=since, since_source=since_source)


def pending_shas(ctx: Context, rng: Range) -> set[str]:
    """The commits of `rng` not on the protected branch (none on a landing, or without a protected ref)."""
    ref = protected_ref(ctx) if ctx.config.role.pending else None
    if ref is None or landing(ctx):
        return set()
    return set(ctx.git.text("rev-list", rng.spec, f"^{ctx.git.must_resolve(ref)}", "--").split())


def names_issue(message: str, pattern: re.Pattern[str]) -> bool:
    """The message references an issue with one of record.ref_keywords: `Refs #12`, `Closes: #3`."""
    return pattern.search(message) is not None


def has_marker(message: str, marker: str | None) -> bool:
    """The configured outside-contribution trailer (`Contribution: outside`) on a line of its own."""
    if not marker:
        return False
    return any(line.strip().lower() == marker.strip().lower() for line in message.splitlines())
