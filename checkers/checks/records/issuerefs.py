"""An issue number agrees in three places: the reference in a commit or PR body, the intake record filed
under the row that body names, and that row's spec."""
from __future__ import annotations

import re
from dataclasses import dataclass

from checkers.records import Records

_ROW_LINE = re.compile(r"^Row:[ \t]*(\S+)[ \t]*$", re.MULTILINE)
UNFILED, NOT_IN_SPEC, NO_ROW = "unfiled", "not-in-spec", "no-row"


@dataclass(frozen=True)
class RefProblem:
    kind: str  # UNFILED | NOT_IN_SPEC | NO_ROW
    number: int
    message: str
    hint: str


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


def check_refs(numbers: list[int], rows: tuple[str, ...], records: Records) -> list[RefProblem]:
    """Each referenced number needs an intake record under one of `rows`, listed in that row's spec."""
    out = []
    for n in numbers:
        if not rows:
            out.append(RefProblem(NO_ROW, n, f"references #{n} but names no row (no Row: trailer)",
                                  "add a Row: <ROW-ID> trailer naming the row the issue is filed under"))
            continue
        filed = [i.model.row for i in records.issues if i.model.number == n and i.model.row in rows]
        if not filed:
            where = " or ".join(f".agents/issues/{r}/ISSUE-{n}.md" for r in rows)
            out.append(RefProblem(UNFILED, n, f"references #{n} but no intake record is filed under "
                                  f"{', '.join(rows)}", f"file {where} (number, row, filed)"))
            continue
        listed = [r for r in filed if n in _spec_issues(records, r)]
        if not listed:
            spec_path = _spec_path(records, filed[0])
            out.append(RefProblem(NOT_IN_SPEC, n, f"references #{n}, filed under {filed[0]}, but "
                                  f"{spec_path} does not list #{n}", f"list #{n} under '## Issues' in {spec_path}"))
    return out


def _spec_path(records: Records, row_id: str) -> str:
    row = records.rows.get(row_id)
    return (row.model.spec if row else None) or f".agents/specs/{row_id}.md"


def _spec_issues(records: Records, row_id: str) -> set[int]:
    spec = records.specs.get(_spec_path(records, row_id))
    return spec.issues if spec else set()
