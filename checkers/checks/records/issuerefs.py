"""An issue number agrees in three places: the reference in a commit or PR body, the intake record filed
under the row that body names, and that row's spec."""

from __future__ import annotations

import re

from ...checks.records.rules import R_NOROW, R_SPEC, R_UNFILED
from ...records import Records
from ...results import Finding

_ROW_LINE = re.compile(r"^Row:[ \t]*(\S+)[ \t]*$", re.MULTILINE)


def ref_pattern(keywords: list[str]) -> re.Pattern[str]:
    """`Refs #5`, `Closes: #5, #7`, `fixes #9`: a keyword, then one or more issue numbers."""
    words = "|".join(re.escape(k) for k in keywords)
    return re.compile(rf"\b(?:{words}):?[ \t]+((?:#\d+(?:[ \t]*,?[ \t]*(?:and[ \t]+)?)?)+)", re.IGNORECASE)


def issue_refs(message: str, pattern: re.Pattern[str]) -> list[int]:
    found: list[int] = []
    for m in pattern.finditer(message):
        for n in re.findall(r"#(\d+)", m.group(1)):
            if int(n) not in found:
                found.append(int(n))
    return found


def body_rows(text: str) -> tuple[str, ...]:
    """`Row:` lines anywhere in a PR body (a body has no single trailer block)."""
    return tuple(dict.fromkeys(_ROW_LINE.findall(text)))


def check_refs(
    numbers: list[int], rows: tuple[str, ...], records: Records, prefix: str = "", path: str | None = None
) -> list[Finding]:
    """Each referenced number needs an intake record under one of `rows`, listed in that row's spec.
    `prefix` names the referring message in each finding (`commit 0123abcd `); `path` is its file, if any."""
    out: list[Finding] = []
    for n in numbers:
        if not rows:
            out.append(
                R_NOROW.finding(
                    f"{prefix}references #{n} but names no row (no Row: trailer)",
                    path,
                    None,
                    "add a Row: <ROW-ID> trailer naming the row the issue is filed under",
                )
            )
            continue
        filed = [i.model.row for i in records.issues if i.model.number == n and i.model.row in rows]
        if not filed:
            where = " or ".join(f".agents/issues/{r}/ISSUE-{n}.md" for r in rows)
            out.append(
                R_UNFILED.finding(
                    f"{prefix}references #{n} but no intake record is filed under {', '.join(rows)}",
                    path,
                    None,
                    f"file {where} (number, row, filed)",
                )
            )
            continue
        listed = [r for r in filed if n in _spec_issues(records, r)]
        if not listed:
            spec_path = _spec_path(records, filed[0])
            out.append(
                R_SPEC.finding(
                    f"{prefix}references #{n}, filed under {filed[0]}, but {spec_path} does not list #{n}",
                    path,
                    None,
                    f"list #{n} under '## Issues' in {spec_path}",
                )
            )
    return out


def filed_under(records: Records, numbers: list[int]) -> tuple[str, ...]:
    """The rows the issues `numbers` are filed under (a pending outside commit names its issue, not a row)."""
    return tuple(dict.fromkeys(i.model.row for i in records.issues if i.model.number in numbers))


def _spec_path(records: Records, row_id: str) -> str:
    row = records.rows.get(row_id)
    return (row.model.spec if row else None) or f".agents/specs/{row_id}.md"


def _spec_issues(records: Records, row_id: str) -> set[int]:
    spec = records.specs.get(_spec_path(records, row_id))
    return spec.issues if spec else set()
