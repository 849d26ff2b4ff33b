"""Every record under `.agents/` validates against its model, names a known area, and is counted per area."""
from __future__ import annotations

import argparse

from checkers.context import Context
from checkers.records import Records
from checkers.results import Finding, Result, Rule

ID = "agent-record"
RULES = (
    Rule("AR001", "record-invalid", "a row, claim, issue record or ledger entry does not validate"),
    Rule("AR002", "row-unknown-area", "a row's area is not one of the configured areas"),
)
R_INVALID, R_AREA = RULES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(ctx: Context, args: argparse.Namespace) -> Result:
    records = ctx.records
    findings = check_records(records, ctx.config.rows.areas)
    counts = area_counts(records, ctx.config.rows.areas)
    ok = "OK: " + " ".join(f"{area}={n}" for area, n in counts.items())
    return Result.judge(ID, findings, records.examined + len(records.problems), "records", ok)


def check_records(records: Records, areas: list[str]) -> list[Finding]:
    findings = []
    for problem in records.problems:
        for line, field, message in problem.problems:
            text = f"{field}: {message}" if field else message
            findings.append(R_INVALID.finding(text, problem.path, line,
                                              "fix the record so it matches its model (see AGENTS.md)"))
    for row in records.rows.values():
        if row.model.area not in areas:
            line = row.doc.lc.key("area")[0] + 1
            findings.append(R_AREA.finding(f"area {row.model.area!r} is not one of {areas}", row.path, line,
                                           "use a configured area or add it to rows.areas in .agents/config.yaml"))
    return findings


def area_counts(records: Records, areas: list[str]) -> dict[str, int]:
    """Rows per area, derived at read time (never stored)."""
    counts = {area: 0 for area in areas}
    for row in records.rows.values():
        if row.model.area in counts:
            counts[row.model.area] += 1
    return counts
