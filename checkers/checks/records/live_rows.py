"""Every row in an active state has a live claim (its branch exists, or commits have named the row since the claim), and every claim points at an active row that exists.

What "examined" means here: the rows and claims read. A repository with rows but none active passes
honestly (no row needs a claim and no claim is stale: `OK: 0 active rows, 0 claims (33 rows read)`);
one with no rows and no claims at all has examined nothing and is an error.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ...context import Context
from ...gitio import TrailedCommit
from ...records import Records, key_line
from ...results import Finding, Result, Rule, Status

ID = "live-rows"
RULES = (
    Rule("LR001", "active-row-unclaimed", "a row in an active state has no claim"),
    Rule("LR002", "claim-not-live", "a claim's branch exists nowhere and no commit has named its row since"),
    Rule("LR003", "claim-row-inactive", "a claim points at a row that does not exist or is not active"),
)
R_UNCLAIMED, R_DEAD, R_INACTIVE = RULES


@dataclass(frozen=True)
class Liveness:
    """What git says about one claim: where its branch is, and the row's last named activity."""

    local: bool
    remote: bool | None  # None: the remote's refs are not there to look at
    last_activity: dt.datetime | None  # newest commit naming the row (any ref)
    since_claim: bool  # a commit named the row on or after the claim's date
    looked: str = "locally"  # where the branch was looked for
    verdict: str = ""  # IN-FLIGHT, LANDED or ABANDONED
    evidence: str = ""  # the git fact the verdict rests on


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--check",
        action="store_true",
        help="gate (the default of `rowgate check`; kept for `scripts/audit-live-rows.py --check`)",
    )
    parser.add_argument(
        "--report",
        action="store_true",
        help="print the table of active rows, claims, branches and last activity; never fail",
    )


def run(ctx: Context, args: argparse.Namespace) -> Result:
    records, cfg = ctx.records, ctx.config
    active = cfg.rows.active_states
    liveness = probe(ctx, records) if records.claims else {}
    findings, unverified = check_live(records, active, liveness)
    table = render_table(records, active, liveness)
    if liveness:
        verdicts = [v.verdict for v in liveness.values()]
        table.append("claims: " + " ".join(f"{v}={verdicts.count(v)}" for v in ("IN-FLIGHT", "LANDED", "ABANDONED")))
    n_active = sum(1 for r in records.rows.values() if r.model.state in active)
    counts = f"{n_active} active rows, {len(records.claims)} claims ({len(records.rows)} rows read)"
    if getattr(args, "report", False) and not getattr(args, "check", False):
        note = f"report only, {len(findings)} findings would fail --check" if findings else counts
        return Result(
            check=ID,
            status=Status.PASS,
            summary=f"OK: {note}",
            examined=len(records.rows),
            unit="rows",
            findings=findings,
            details=table,
        )
    if unverified and not findings:
        return Result.skip(
            ID,
            f"cannot verify the branches of claims {', '.join(unverified)}: remote "
            f"{cfg.live_rows.remote!r} has no refs here; fetch it or set live_rows.remote",
        )
    return Result.judge(ID, findings, len(records.rows) + len(records.claims), "rows and claims", f"OK: {counts}")


def probe(ctx: Context, records: Records) -> dict[str, Liveness]:
    """Two batched git reads: the refs under heads and the remote, and the Row trailers of every ref's
    commits since the oldest claim."""
    cfg = ctx.config.live_rows
    remote = cfg.remote if cfg.remote and cfg.remote in ctx.git.remotes() else None
    refs = ctx.git.refs("refs/heads/", *([f"refs/remotes/{remote}/"] if remote else []))
    has_remote_refs = remote is not None and any(r.startswith(f"refs/remotes/{remote}/") for r in refs)
    # remote: null in the config means local branches only, so "not local" is a verdict, not a doubt
    unknown_remote = None if cfg.remote else False
    oldest = min(c.model.since for c in records.claims.values())
    # a whole day: git reads a bare date as that day at the current time of day, which drops the day's
    # earlier commits; the day starts where it starts first, at UTC+14
    since = f"--since={_day_start(oldest).isoformat()}"
    commits = ctx.git.commits_with_trailers("--all", ("Row",), extra=(since,))
    on_head = set(ctx.git.text("rev-list", since, "HEAD", "--").split()) if ctx.git.resolve("HEAD") else set()
    out = {}
    for cid, claim in records.claims.items():
        c = claim.model
        branches = {c.branch.removeprefix("refs/heads/")} | {f"{cfg.branch_prefix}{r}" for r in c.row_ids}
        found = sorted(
            ref
            for b in branches
            for ref in (f"refs/heads/{b}", f"refs/remotes/{remote}/{b}")
            if ref in refs and (has_remote_refs or ref.startswith("refs/heads/"))
        )
        local = any(ref.startswith("refs/heads/") for ref in found)
        on_remote = any(not ref.startswith("refs/heads/") for ref in found) if has_remote_refs else unknown_remote
        # a commit names the claim when a Row: trailer names one of its rows, or its message names a row or the claim
        named = re.compile(r"(?<![\w-])(?:" + "|".join(re.escape(x) for x in (*c.row_ids, cid)) + r")(?![\w-])")
        naming = [x for x in commits if any(r in x.rows for r in c.row_ids) or named.search(x.commit.message)]
        start = _day_start(c.since).timestamp()
        last = dt.datetime.fromtimestamp(max(x.time for x in naming), dt.UTC) if naming else None
        recent = [x for x in naming if x.time >= start]
        looked = f"locally or on {remote}" if has_remote_refs else "locally"
        verdict, evidence = classify(ctx, found, recent, on_head, c.since)
        out[cid] = Liveness(local, on_remote, last, bool(recent), looked, verdict, evidence)
    return out


def classify(
    ctx: Context, found: list[str], recent: list[TrailedCommit], on_head: set[str], since: dt.date
) -> tuple[str, str]:
    """IN-FLIGHT (a branch with work not on HEAD, or a new branch, or commits on other refs), LANDED (the
    claim's commits are on HEAD), ABANDONED (no branch, and no commit names it since the claim)."""
    head = ctx.git.resolve("HEAD")
    for ref in found:
        if not head or not ctx.git.is_ancestor(ref, head):
            return "IN-FLIGHT", f"{ref.removeprefix('refs/heads/')} has commits not on HEAD"
    landed = [x for x in recent if x.commit.sha in on_head]
    if landed:
        newest = landed[-1]
        day = dt.datetime.fromtimestamp(newest.time, dt.UTC).date()
        return "LANDED", f"commit {newest.commit.short} on HEAD names it ({day})"
    if found:
        return "IN-FLIGHT", f"branch {found[0].removeprefix('refs/heads/')} exists, no commits of its own yet"
    if recent:
        return "IN-FLIGHT", f"commit {recent[-1].commit.short} names it on another ref"
    return "ABANDONED", f"no branch, and no commit names it since {since}"


def _day_start(day: dt.date) -> dt.datetime:
    """The first moment `day` exists anywhere (00:00 at UTC+14): a commit made on the claim's day in any time
    zone counts as on or after it."""
    return dt.datetime.combine(day, dt.time(), dt.timezone(dt.timedelta(hours=14)))


def check_live(
    records: Records, active: Sequence[str], liveness: dict[str, Liveness]
) -> tuple[list[Finding], list[str]]:
    """Findings, and the claims whose liveness could not be verified (no remote refs to look at)."""
    findings, unverified = [], []
    claimed = {r for c in records.claims.values() for r in c.model.row_ids}
    for row in records.rows.values():
        m = row.model
        if m.state in active and not (m.claim and m.claim in records.claims) and m.id not in claimed:
            findings.append(
                R_UNCLAIMED.finding(
                    f"{m.id} is {m.state} but has no claim",
                    row.path,
                    key_line(row.doc, "state"),
                    f"claim it (rowgate claim {m.id} --branch row/{m.id}) or move it "
                    "out of the active states (rowgate row set)",
                )
            )
    for cid, claim in records.claims.items():
        c, stale = claim.model, False
        for row_id in c.row_ids:
            target = records.rows.get(row_id)
            if target is None or target.model.state not in active:
                what = "does not exist" if target is None else f"is {target.model.state} (active: {', '.join(active)})"
                findings.append(
                    R_INACTIVE.finding(
                        f"claim {cid} points at row {row_id}, which {what}",
                        claim.path,
                        key_line(claim.doc, "row" if row_id == c.row else "rows"),
                        "remove the claim (rowgate row set releases it) or move the row to an active state",
                    )
                )
                stale = True
        if stale:
            continue
        live = liveness.get(cid)
        if live is None or live.local or live.remote or live.since_claim:
            continue
        if live.remote is None:
            unverified.append(cid)
            continue
        findings.append(
            R_DEAD.finding(
                f"claim {cid} on {', '.join(c.row_ids)} is ABANDONED: branch {c.branch} is not found {live.looked}, "
                f"and no commit has named {' or '.join(c.row_ids)} since {c.since}",
                claim.path,
                key_line(claim.doc, "branch"),
                "push the branch, or release the claim (rowgate row set ID --state READY)",
            )
        )
    return findings, unverified


def _verdict(live: Liveness | None) -> str:
    return f"{live.verdict}: {live.evidence}" if live is not None and live.verdict else ""


def render_table(records: Records, active: Sequence[str], liveness: dict[str, Liveness]) -> list[str]:
    lines = [
        "| row | state | claim | owner | branch | where | verdict | last activity |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in sorted((r for r in records.rows.values() if r.model.state in active), key=lambda r: r.model.id):
        m = row.model
        claim = records.claims.get(m.claim) if m.claim else None
        live = liveness.get(m.claim or "")
        where = (
            ""
            if live is None
            else ", ".join(w for w, ok in (("local", live.local), ("remote", live.remote)) if ok) or "missing"
        )
        last = live.last_activity.strftime("%Y-%m-%d %H:%M") if live and live.last_activity else ""
        lines.append(
            f"| {m.id} | {m.state} | {m.claim or ''} | {claim.model.owner if claim else ''} | "
            f"{claim.model.branch if claim else ''} | {where} | {_verdict(live)} | {last} |"
        )
    return lines
