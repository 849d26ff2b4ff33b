"""Markdown pipe tables: found line by line, split into cells, each line keeping its number and raw text.

A table is a run of lines starting with `|`; its first line is the header and a separator line (`---`
cells) may follow. Cells split on unescaped pipes, as GitHub renders them. Reading never raises: a line
whose cell count differs from its header's is kept with `malformed` set, for the caller to report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_PIPE = re.compile(r"(?<!\\)\|")
_SEPARATOR = re.compile(r":?-{3,}:?")
_NOT_WORD = re.compile(r"[^a-z0-9]+")


@dataclass(frozen=True)
class TableLine:
    line: int  # 1-based
    cells: tuple[str, ...]
    raw: str


@dataclass
class Table:
    header: TableLine
    separator: int | None  # line of the `---` row, if any
    lines: list[TableLine] = field(default_factory=list)

    @property
    def names(self) -> tuple[str, ...]:
        """The header cells, normalized (see `normalize`)."""
        return tuple(normalize(c) for c in self.header.cells)

    def malformed(self, line: TableLine) -> bool:
        return len(line.cells) != len(self.header.cells)


def split_cells(line: str) -> tuple[str, ...]:
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    return tuple(c.strip() for c in _PIPE.split(body))


def normalize(header: str) -> str:
    """A header name as compared: markup dropped, lowercase, runs of other characters one space
    (`Tests/evidence` and `tests evidence` are the same column)."""
    text = header.replace("`", "").replace("*", "").lower()
    return " ".join(_NOT_WORD.sub(" ", text).split())


def is_separator(cells: tuple[str, ...]) -> bool:
    return bool(cells) and all(_SEPARATOR.fullmatch(c) for c in cells)


def read_tables(text: str) -> list[Table]:
    """Every pipe table of a markdown text, in order."""
    tables: list[Table] = []
    current: Table | None = None
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.startswith("|"):
            current = None
            continue
        cells = split_cells(raw)
        if current is None:
            current = Table(TableLine(n, cells, raw), None)
            tables.append(current)
        elif current.separator is None and not current.lines and is_separator(cells):
            current.separator = n
        else:
            current.lines.append(TableLine(n, cells, raw))
    return tables


def clean(cell: str) -> str:
    """A cell's text without its emphasis and code markup: `**\\`ACTIVE\\`**` -> ACTIVE."""
    return cell.replace("**", "").strip().strip("`").strip()
