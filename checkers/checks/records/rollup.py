"""A hand-written summary table (rows per state) agrees with the detailed rows it sums: each state column
and the row count of its totals line equal what the records say, so the summary can never drift."""

from __future__ import annotations

from pathlib import Path

from ...config import Rollup
from ...paths import OutsideRepo, confine
from ...records import Records
from ...recordsources.tables import clean, normalize, read_tables
from ...results import Finding
from .rules import R_ROLLUP


def check_rollups(root: Path, records: Records, rollups: list[Rollup], states: list[str]) -> list[Finding]:
    return [f for rollup in rollups for f in check_rollup(root, records, rollup, states)]


def check_rollup(root: Path, records: Records, rollup: Rollup, states: list[str]) -> list[Finding]:
    hint = "update the summary to the rows' states in the same change"
    try:
        text = confine(root, rollup.path).read_text(encoding="utf-8", errors="replace")
    except (OSError, OutsideRepo) as exc:
        return [R_ROLLUP.finding(f"cannot read the summary table: {exc}", rollup.path, None, hint)]
    sources = set(rollup.rows_from or [rollup.path])
    # an imported row (`rowgate records import`) counts for the table it came from and is written back to
    rows = [r.model for r in records.rows.values() if (r.model.table.path if r.model.table else r.path) in sources]
    expected = {normalize(rollup.count_column): len(rows)}
    expected.update({normalize(s): sum(r.state == s for r in rows) for s in states})
    for table in read_tables(text):
        if normalize(table.header.cells[0]) != normalize(rollup.header):
            continue
        total = next((x for x in table.lines if normalize(x.cells[0]) == normalize(rollup.total)), None)
        if total is None or len(total.cells) != len(table.header.cells):
            return [
                R_ROLLUP.finding(
                    f"summary table has no well-formed {rollup.total} line", rollup.path, table.header.line, hint
                )
            ]
        out = []
        for name, cell in zip(table.names[1:], total.cells[1:], strict=True):
            if name not in expected:
                continue
            value = clean(cell)
            if not value.isdigit():
                out.append(R_ROLLUP.finding(f"summary {name}={value!r} is not a number", rollup.path, total.line, hint))
            elif int(value) != expected[name]:
                out.append(
                    R_ROLLUP.finding(f"summary {name}={value}; actual {expected[name]}", rollup.path, total.line, hint)
                )
        return out
    return [R_ROLLUP.finding(f"no summary table whose header starts with {rollup.header!r}", rollup.path, None, hint)]
