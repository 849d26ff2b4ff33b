"""Table lines as records: a configured source's tables found by header, each line's cells mapped to the
fields of one record (checkers.config.TableSource). Returns plain field dicts with their file and line; the
records module validates them with the same models as the one-file-per-record YAML.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import TableColumn, TableSource
from ..paths import OutsideRepo, confine
from ..results import RecordError
from ..safe_regex import compile_pattern
from .tables import Table, TableLine, clean, normalize, read_tables

_CODE_SPAN = re.compile(r"`([^`]+)`")
_LINK = re.compile(r"\]\(<?([^)\s>]+)>?\)")
_LINE_FRAGMENT = re.compile(r"L(\d+)(?:-L?(\d+))?")
MAX_TABLE_BYTES = 8 << 20  # a record table larger than this is not read (a finding), so a hostile file stays cheap


@dataclass
class TableRecord:
    """One record read from a table line: its fields, where it is, and which table it came from."""

    path: str
    line: int
    data: dict[str, Any]
    table: int  # index of the table in its file
    raw: str


@dataclass
class SourceRead:
    records: list[TableRecord] = field(default_factory=list)
    problems: list[RecordError] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # the files the source named
    tables: int = 0  # tables whose header matched


def read_source(root: Path, source: TableSource, list_fields: Collection[str]) -> SourceRead:
    """Every record of one table source; `list_fields` are the fields that hold lists."""
    out = SourceRead()
    for rel in _files(root, source.paths):
        try:
            path = confine(root, rel)
            if path.stat().st_size > MAX_TABLE_BYTES:
                out.problems.append(RecordError(rel, [(None, "", f"larger than {MAX_TABLE_BYTES} bytes; not read")]))
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
        except (OSError, OutsideRepo) as exc:
            out.problems.append(RecordError(rel, [(None, "", f"cannot read the record table: {exc}")]))
            continue
        out.files.append(rel)
        last: tuple[Table, dict[str, list[int]]] | None = None
        for index, table in enumerate(read_tables(text)):
            columns = match_columns(table, source.columns)
            if columns is None and last is not None and continues(last[0], table):
                # a prose line split the table: the lines after it are more lines of the same table
                orphan = Table(last[0].header, last[0].separator, [table.header, *table.lines])
                _read_table(out, rel, index, orphan, last[1], source, list_fields)
                continue
            if columns is None:
                last = None
                continue
            out.tables += 1
            last = (table, columns)
            _read_table(out, rel, index, table, columns, source, list_fields)
    if not out.files:
        out.problems.append(RecordError(source.paths[0], [(None, "", "no file matches this record table source")]))
    return out


def match_columns(table: Table, columns: dict[str, TableColumn]) -> dict[str, list[int]] | None:
    """field -> the indexes of its columns, when the header has a column for every required field."""
    names = table.names
    found: dict[str, list[int]] = {}
    for fld, col in columns.items():
        wanted = {normalize(h) for h in col.headers}
        idx = [i for i, name in enumerate(names) if name in wanted]
        if not idx and not col.optional:
            return None
        found[fld] = idx
    return found


def continues(previous: Table, table: Table) -> bool:
    """A headerless run of lines (no separator) with the previous table's cell count continues it."""
    return table.separator is None and len(table.header.cells) == len(previous.header.cells)


def _read_table(
    out: SourceRead,
    rel: str,
    index: int,
    table: Table,
    columns: dict[str, list[int]],
    source: TableSource,
    list_fields: Collection[str],
) -> None:
    key = "id" if "id" in columns else "number"
    id_pattern = compile_pattern(source.id_pattern) if source.id_pattern else None
    placeholders = {p.lower() for p in source.placeholders}
    for line in table.lines:
        first = columns[key][0]
        ident = clean(line.cells[first]) if first < len(line.cells) else ""
        if id_pattern is not None and not id_pattern.fullmatch(ident):
            continue  # a summary or note line, not a record
        if table.malformed(line):
            out.problems.append(
                RecordError(
                    rel,
                    [
                        (
                            line.line,
                            "",
                            f"table line has {len(line.cells)} cells; its header (line {table.header.line}) "
                            f"has {len(table.header.cells)}",
                        )
                    ],
                )
            )
            continue
        data: dict[str, Any] = dict(source.values)
        for fld, idx in columns.items():
            value = field_value(line, idx, source.columns[fld], fld in list_fields, placeholders, rel)
            if value is not None:
                data[fld] = value
        out.records.append(TableRecord(rel, line.line, data, index, line.raw))


def field_value(
    line: TableLine, idx: list[int], col: TableColumn, is_list: bool, placeholders: set[str], rel: str
) -> Any:
    found: list[str] = []
    for i in idx:
        cell = line.cells[i]
        if clean(cell).lower() in placeholders:
            continue
        if col.pattern is not None:
            found += [m.group(1) if m.groups() else m.group(0) for m in compile_pattern(col.pattern).finditer(cell)]
        elif is_list:
            spans = _CODE_SPAN.findall(cell)
            found += spans if spans else [p.strip() for p in cell.split(",") if p.strip()]
        else:
            found.append(clean(cell))
    if col.relative:
        base = posixpath.dirname(rel)
        found = [posixpath.normpath(posixpath.join(base, f.split("#", 1)[0])) for f in found]
    if col.links:
        found += [t for i in idx for t in _link_anchors(line.cells[i], rel)]
    found = [f for f in found if f.lower() not in placeholders]
    if is_list:
        return list(dict.fromkeys(found))
    return found[0] if found else None


def _link_anchors(cell: str, rel: str) -> list[str]:
    """The local link targets of a cell, repository-relative, a line fragment written as `:line`."""
    out = []
    for target in _LINK.findall(cell):
        if target.startswith(("http://", "https://", "mailto:", "#")):
            continue
        path, _, fragment = target.partition("#")
        path = posixpath.normpath(posixpath.join(posixpath.dirname(rel), path))
        m = _LINE_FRAGMENT.fullmatch(fragment)
        if m:
            path += f":{m.group(1)}" + (f"-{m.group(2)}" if m.group(2) else "")
        out.append(path)
    return out


def _files(root: Path, patterns: list[str]) -> list[str]:
    out: set[str] = set()
    for pattern in patterns:
        if not any(ch in pattern for ch in "*?["):
            if (root / pattern).is_file():
                out.add(pattern)
            continue
        try:
            out.update(p.relative_to(root).as_posix() for p in root.glob(pattern) if p.is_file())
        except ValueError:  # an absolute or otherwise unusable pattern: matches nothing
            continue
    return sorted(out)
