"""Changes reach main through a row: in `trailer` mode every commit since the cutover names an existing row in a `Row:` trailer; in `branch` mode main's first-parent history is merges of `row/<ID>` branches.

An outside contribution has a path on its own branch: its commits are *pending* until they reach the
protected branch (checks.records.pending), and a pending commit passes when it names a row, an issue
(`Refs #N`) or carries the configured outside-contribution marker. Landing it is judged as today: a
maintainer files its row and merges it with a merge commit that names the row (`Row: <ID>`); that merge
covers every commit it brings in.
"""

from __future__ import annotations

import argparse
import re

from ...config import RoleConfig
from ...context import Context, NoRange, add_range_arguments
from ...files import select
from ...gitio import TrailedCommit
from ...ids import ROW_ID
from ...results import Finding, Result, Rule
from ...safe_regex import compile_pattern
from .issuerefs import ref_pattern
from .pending import has_marker, names_issue, pending_shas, record_range

ID = "role-discipline"
RULES = (
    Rule("RD001", "commit-without-row", "a commit names no row (trailer mode)"),
    Rule("RD002", "commit-unknown-row", "a commit or merge names a row that does not exist"),
    Rule(
        "RD003",
        "commit-outside-row-branch",
        "a first-parent commit on main is not a merge of a row branch (branch mode)",
    ),
    Rule(
        "RD004",
        "pending-without-reference",
        "a pending commit (not yet on the protected branch) names no row, no issue and no outside marker",
    ),
)
R_NOROW, R_UNKNOWN, R_DIRECT, R_PENDING = RULES
_HINT_OUTSIDE = "or, for an outside contribution, file its row and merge it with a `Row: <ID>` merge commit"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_range_arguments(parser)


def run(ctx: Context, args: argparse.Namespace) -> Result:
    cfg = ctx.config.role
    try:
        rng = record_range(ctx, args, ctx.config.cutover, "config cutover")
        spec = rng.spec
    except NoRange as exc:
        return Result.error(ID, str(exc), hint=exc.hint)
    rows = set(ctx.records.rows)
    scope = ""
    if not ctx.git.commits_with_trailers(spec, first_parent=True, extra=("--max-count=1",)):
        # an empty range (a fresh clone at its upstream): judge the head commit itself rather than nothing
        head = ctx.git.resolve(rng.head)
        if head is not None:
            spec = f"{head}^!" if ctx.git.resolve(f"{head}^") else head
            scope = f"; the range was empty, so the head commit {head[:12]} was judged"
    exempt = _exempt(ctx, spec, cfg.exempt)
    commits = ctx.git.commits_with_trailers(spec, first_parent=cfg.mode == "branch")
    pending = pending_shas(ctx, rng)
    landed = [c for c in commits if c.commit.sha not in pending]
    pattern = ref_pattern(ctx.config.record.ref_keywords)
    findings = check_pending([c for c in commits if c.commit.sha in pending], rows, pattern, cfg.outside_marker)
    if cfg.mode == "branch":
        findings += check_branch_mode(landed, rows, cfg.branch_prefix, Scope(ctx.config.rows.id_pattern, cfg, exempt))
    else:
        findings += check_trailer_mode(landed, rows, exempt)
    merges = sum(c.commit.is_merge for c in commits)
    how = f"; {len(pending)} pending" if pending else ""
    ok = f"OK: {len(commits)} commits ({merges} merges{how}) reach main through a row ({cfg.mode} mode){scope}"
    # trailer mode judges the non-merge commits (a merge only vouches for them): a range of merges alone
    # examined nothing
    judged = len(commits) if cfg.mode == "branch" else len(commits) - merges
    return Result.judge(ID, findings, judged if not findings else len(commits), "commits", ok)


class Scope:
    """What branch mode accepts besides a merge of a row branch: the row id pattern, topic branches, pull
    request references, and the commits that change only integration paths."""

    def __init__(self, id_pattern: str, cfg: RoleConfig | None = None, exempt: set[str] | None = None):
        self.id_pattern = compile_pattern(id_pattern, trusted=id_pattern == ROW_ID)
        self.topic_branches = bool(cfg and cfg.topic_branches)
        self.pr_refs = bool(cfg and cfg.pr_refs)
        self.exempt = exempt or set()


def _exempt(ctx: Context, rng: str, globs: list[str]) -> set[str]:
    """The non-merge commits of the range whose every changed path is an integration path."""
    if not globs:
        return set()
    return {
        sha for sha, paths in ctx.git.changed_paths(rng).items() if paths and len(select(paths, globs)) == len(paths)
    }


def check_trailer_mode(commits: list[TrailedCommit], rows: set[str], exempt: set[str] | None = None) -> list[Finding]:
    findings = _unknown_rows(commits, rows)
    covered = _covered_by_row_merges(commits, rows)
    for c in commits:
        if c.commit.is_merge or c.rows or c.commit.sha in covered or c.commit.sha in (exempt or ()):
            continue
        findings.append(
            R_NOROW.finding(
                f"commit {c.commit.short} names no row (no Row: trailer)",
                None,
                None,
                f"add a `Row: <ROW-ID>` trailer naming a row in .agents/rows/, {_HINT_OUTSIDE}",
            )
        )
    return findings


def check_pending(
    commits: list[TrailedCommit], rows: set[str], pattern: re.Pattern[str], marker: str | None
) -> list[Finding]:
    """A pending commit (a contribution not yet landed) names an existing row, an issue, or carries the
    outside-contribution marker; merges within the pending work vouch for nothing and need nothing."""
    findings = _unknown_rows(commits, rows)
    for c in commits:
        if (
            c.commit.is_merge
            or c.rows
            or names_issue(c.commit.message, pattern)
            or has_marker(c.commit.message, marker)
        ):
            continue
        also = f", or a `{marker}` trailer" if marker else ""
        findings.append(
            R_PENDING.finding(
                f"commit {c.commit.short} is pending (not yet on the protected branch) and names no row, "
                f"no issue and no outside-contribution marker",
                None,
                None,
                f"add `Row: <ROW-ID>` (a row in .agents/rows/) or `Refs #<issue>` (the issue your change answers)"
                f"{also}; a maintainer lands it with a `Row: <ID>` merge commit",
                c.commit.sha,
            )
        )
    return findings


_PR_REF = re.compile(r"(?<![\w&])#\d+\b")


def check_branch_mode(
    first_parent: list[TrailedCommit], rows: set[str], prefix: str, scope: Scope | None = None
) -> list[Finding]:
    scope = scope or Scope(ROW_ID)
    findings = _unknown_rows(first_parent, rows)
    # the prefix compares case-exact (row/ is not Row/); the name is any branch name, a row id or a topic
    pattern = re.compile(rf"(?<![\w.-]){re.escape(prefix)}([\w.-]+(?:/[\w.-]+)*)")
    for c in first_parent:
        subject = c.commit.message.splitlines()[0] if c.commit.message else ""
        if c.commit.sha in scope.exempt or (scope.pr_refs and _PR_REF.search(subject)):
            continue
        if not c.commit.is_merge:
            findings.append(
                R_DIRECT.finding(
                    f"commit {c.commit.short} landed on main directly, not through a merge of a {prefix}<ID> branch",
                    None,
                    None,
                    f"land work by merging a {prefix}<ID> branch, {_HINT_OUTSIDE}",
                )
            )
            continue
        names = [n.rstrip(".") for n in pattern.findall(c.commit.message or "")]
        named = [n for n in names if n in rows or (not scope.topic_branches and scope.id_pattern.fullmatch(n))]
        if scope.topic_branches and names and not named:
            continue  # a topic branch under the prefix: the merge is the reviewed path
        if named and all(n not in rows for n in named):
            findings.append(
                R_UNKNOWN.finding(
                    f"merge {c.commit.short} merges {prefix}{named[0]}, but row {named[0]} does not exist",
                    None,
                    None,
                    f"file .agents/rows/{named[0]}.yaml before merging",
                )
            )
        elif not named and not c.rows:
            findings.append(
                R_DIRECT.finding(
                    f"merge {c.commit.short} merges no {prefix}<ID> branch and names no row",
                    None,
                    None,
                    f"merge a {prefix}<ID> branch, {_HINT_OUTSIDE}",
                )
            )
    return findings


def _unknown_rows(commits: list[TrailedCommit], rows: set[str]) -> list[Finding]:
    return [
        R_UNKNOWN.finding(
            f"commit {c.commit.short} names row {r}, which does not exist",
            None,
            None,
            f"file .agents/rows/{r}.yaml or fix the Row: trailer",
        )
        for c in commits
        for r in c.rows
        if r not in rows
    ]


def _covered_by_row_merges(commits: list[TrailedCommit], rows: set[str]) -> set[str]:
    """Commits that a merge naming an existing row brings in: reachable from its second parent but not
    from its first, within the range (the graph is walked in memory; git was read once)."""
    parents = {c.commit.sha: c.commit.parent_shas for c in commits}

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            sha = todo.pop()
            if sha in parents and sha not in seen:
                seen.add(sha)
                todo.extend(parents[sha])
        return seen

    covered: set[str] = set()
    for c in commits:
        if c.commit.is_merge and c.rows and all(r in rows for r in c.rows):
            mainline = reach(c.commit.parent_shas[0])
            for side in c.commit.parent_shas[1:]:
                covered |= reach(side) - mainline
    return covered
