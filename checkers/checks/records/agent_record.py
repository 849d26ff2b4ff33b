"""Every record under `.agents/` validates, meets its state's requirements, points at records that exist, and every issue a commit or PR body references agrees with its intake record and its row's spec."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from ...checks.records import rowreqs
from ...checks.records.issuerefs import body_rows, check_refs, filed_under, issue_refs, ref_pattern
from ...checks.records.ledger_size import check_sizes
from ...checks.records.pending import pending_shas, record_range
from ...checks.records.rollup import check_rollups
from ...checks.records.rules import R_AREA, R_DANGLING, R_INVALID, RULES
from ...context import Context, NoRange, add_range_arguments
from ...records import Records, key_line
from ...results import CheckError, Finding, Result

ID = "agent-record"
__all__ = ["ID", "RULES", "add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_range_arguments(parser)
    parser.add_argument(
        "--message-file",
        metavar="FILE",
        type=Path,
        help="check the issue references of one message (a PR body with Row: lines) "
        "instead of the commits in the range",
    )


def run(ctx: Context, args: argparse.Namespace) -> Result:
    records = ctx.records
    areas = ctx.config.rows.areas
    tree = rowreqs.load_tree(ctx.root, ctx.config.rows, records, ctx.git)
    findings = check_records(records, areas) + check_rows(tree) + check_links(records, ctx.config.rows.orphan_specs)
    findings += check_rollups(ctx.root, records, ctx.config.record.rollups, ctx.config.rows.state_order)
    findings += check_sizes(records, ctx.config.record.ledger_size_cap, ctx.config.record.ledger_size_exempt)
    n_records = records.examined + len(records.problems)
    pattern = ref_pattern(ctx.config.record.ref_keywords)
    message_file = getattr(args, "message_file", None)
    if message_file is not None:
        try:
            text = message_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise CheckError(
                f"cannot read --message-file {message_file}: {exc.strerror}",
                hint="pass the path of a file holding the message or PR body",
            ) from None
        findings += check_message(text, body_rows(text), records, pattern, str(message_file), None)
        examined, unit = n_records + 1, f"items ({n_records} records, 1 message)"
    else:
        pending: set[str] = set()
        try:
            rng = record_range(ctx, args, ctx.config.cutover, "config cutover")
            commits = ctx.git.commits_with_trailers(rng.spec)
            pending = pending_shas(ctx, rng)
        except NoRange:
            commits = []  # no cutover and no base: the records are all there is to check
        for c in commits:
            rows = c.rows
            if not rows and c.commit.sha in pending:
                rows = filed_under(records, issue_refs(c.commit.message, pattern))  # an outside contribution
            findings += check_message(c.commit.message, rows, records, pattern, None, c.commit.short)
        examined, unit = n_records + len(commits), f"items ({n_records} records, {len(commits)} commits)"
    counts = area_counts(records, ctx.config.record.count_areas or areas)
    line = " ".join(f"{area}={n}" for area, n in counts.items())
    # where records come from tables, the counts are worth seeing whatever the verdict (as vllm.cpp prints them)
    details = [f"rows: {line}"] + [f"{path}: {len(ids)} rows" for path, ids in records.tables.items()]
    return Result.judge(ID, findings, examined, unit, "OK: " + line, details if records.tables else None)


def check_records(records: Records, areas: list[str]) -> list[Finding]:
    findings = []
    for problem in records.problems:
        for line, field, message in problem.problems:
            text = f"{field}: {message}" if field else message
            findings.append(
                R_INVALID.finding(text, problem.path, line, "fix the record so it matches its model (see AGENTS.md)")
            )
    for row in records.rows.values():
        if row.model.area not in areas:
            line = row.doc.lc.key("area")[0] + 1
            findings.append(
                R_AREA.finding(
                    f"area {row.model.area!r} is not one of {areas}",
                    row.path,
                    line,
                    "use a configured area or add it to rows.areas in .agents/config.yaml",
                )
            )
    return findings


def check_rows(tree: rowreqs.Tree) -> list[Finding]:
    """Each row against its own state's requirements and its references (rowreqs, shared with `rowgate row`)."""
    return [
        f
        for row in tree.records.rows.values()
        for f in rowreqs.row_findings(row.model, row.model.state, tree, row.path, row.doc)
    ]


def check_links(records: Records, orphan_specs: bool = True) -> list[Finding]:
    """Claims, intake records and ledger entries name rows that exist; intake records sit under their row."""
    findings = []
    for claim in records.claims.values():
        for row_id in claim.model.row_ids:
            if row_id not in records.rows:
                findings.append(
                    R_DANGLING.finding(
                        f"claim {claim.model.id} names row {row_id}, which does not exist",
                        claim.path,
                        key_line(claim.doc, "row" if row_id == claim.model.row else "rows"),
                        "fix the row id or remove the claim",
                    )
                )
    for issue in records.issues:
        folder, name = (["", ""] + issue.path.split("/"))[-2:]
        want = f"ISSUE-{issue.model.number}.md"
        line = key_line(issue.doc, "row")
        if issue.model.row not in records.rows:
            findings.append(
                R_DANGLING.finding(
                    f"intake record names row {issue.model.row}, which does not exist",
                    issue.path,
                    line + 1 if line else None,
                    "file it under a row that exists",
                )
            )
        elif issue.line is None and (folder != issue.model.row or name != want):  # a table line has no file of its own
            findings.append(
                R_DANGLING.finding(
                    f"intake record of #{issue.model.number} for {issue.model.row} is filed as {folder}/{name}",
                    issue.path,
                    line + 1 if line else None,
                    f"move it to .agents/issues/{issue.model.row}/{want}",
                )
            )
    referenced = {r.model.spec for r in records.rows.values()}
    broken = {p.path.rsplit("/", 1)[-1].removesuffix(".yaml") for p in records.problems}  # reported as AR001
    for path in records.specs if orphan_specs else ():
        if path not in referenced and path.rsplit("/", 1)[-1].removesuffix(".md") not in broken:
            findings.append(
                R_DANGLING.finding(
                    "spec belongs to no row (no row's spec: names it)",
                    path,
                    None,
                    "point a row's spec: at it, or remove it",
                )
            )
    for entry in records.ledger.values():
        unknown = [r for r in entry.model.rows if r not in records.rows]
        if unknown:
            findings.append(
                R_DANGLING.finding(
                    f"ledger entry names unknown rows {unknown}",
                    entry.path,
                    key_line(entry.doc, "rows"),
                    "name rows that exist",
                )
            )
    return findings


def check_message(
    text: str, rows: tuple[str, ...], records: Records, pattern: re.Pattern[str], path: str | None, short: str | None
) -> list[Finding]:
    """The three places for one commit message (`short` set) or one PR body (`path` set)."""
    prefix = f"commit {short} " if short else "message "
    return check_refs(issue_refs(text, pattern), rows, records, prefix, path)


def area_counts(records: Records, areas: list[str]) -> dict[str, int]:
    """Rows per area, derived at read time (never stored)."""
    counts = {area: 0 for area in areas}
    for row in records.rows.values():
        if row.model.area in counts:
            counts[row.model.area] += 1
    return counts
