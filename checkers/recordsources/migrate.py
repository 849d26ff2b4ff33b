"""Migration between markdown record tables and one file per record, without loss.

`imports` turns each table line of the configured row and claim sources into a record whose `table:` keeps
every cell as written, by header (mapped or not). `render_tables` writes the table files back from the
record files: the table file is the frame (prose, headings, summary tables, separators and malformed lines
stay as they are) and each record line is rebuilt from its record's cells, with the mapped fields the record
changed since (a new state, a closing commit, added anchors) written into their cells. A line whose cells
did not change keeps its original spacing, so an import followed by a render gives the same bytes.
"""

from __future__ import annotations

import datetime as dt
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..config import Config, TableColumn, TableSource
from ..paths import OutsideRepo, confine
from ..recordmodels import Claim, Loaded, Row, TableCells
from ..results import RecordError
from ..safe_regex import compile_pattern
from ..yamlio import validate
from .load import list_fields
from .mapping import MAX_TABLE_BYTES, _files, continues, field_value, match_columns
from .tables import Table, TableLine, clean, read_tables, split_cells

SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # an id that is also a plain file name


@dataclass
class SourceLine:
    """One record line of a table file, with its table's header and the source that matched it."""

    line: TableLine
    header: TableLine
    source: TableSource
    columns: dict[str, list[int]]


@dataclass
class Imported:
    kind: str  # "rows" or "claims"
    record: Row | Claim
    path: str  # table file
    line: int


@dataclass
class ImportResult:
    records: list[Imported] = field(default_factory=list)
    problems: list[RecordError] = field(default_factory=list)
    tables: set[str] = field(default_factory=set)


KINDS: dict[str, type[Row] | type[Claim]] = {"rows": Row, "claims": Claim}


def cell_map(header: TableLine, cells: tuple[str, ...]) -> dict[str, str]:
    """Cells by header name as written; a repeated header name gets ' #2', ' #3', ..."""
    out: dict[str, str] = {}
    for name, cell in zip(_keys(header), cells, strict=True):
        out[name] = cell
    return out


def _keys(header: TableLine) -> list[str]:
    keys: list[str] = []
    for name in header.cells:
        key, n = name, 1
        while key in keys:
            n += 1
            key = f"{name} #{n}"
        keys.append(key)
    return keys


def _read(root: Path, rel: str) -> str:
    path = confine(root, rel)
    if path.stat().st_size > MAX_TABLE_BYTES:
        raise OSError(f"larger than {MAX_TABLE_BYTES} bytes; not read")
    return path.read_text(encoding="utf-8", errors="replace")


def record_lines(text: str, source: TableSource) -> tuple[list[SourceLine], list[tuple[int, str]]]:
    """The lines of `text` that hold records of `source` (as the record loader reads them), and the
    malformed ones (line, why)."""
    out: list[SourceLine] = []
    bad: list[tuple[int, str]] = []
    key = "id" if "id" in source.columns else "number"
    id_pattern = compile_pattern(source.id_pattern) if source.id_pattern else None
    last: tuple[Table, dict[str, list[int]]] | None = None
    for table in read_tables(text):
        columns = match_columns(table, source.columns)
        lines = table.lines
        if columns is None and last is not None and continues(last[0], table):
            # a prose line split the table: the lines after it are more lines of the same table
            lines, header, columns = [table.header, *table.lines], last[0].header, last[1]
        elif columns is None:
            last = None
            continue
        else:
            header = table.header
            last = (table, columns)
        for line in lines:
            first = columns[key][0]
            ident = clean(line.cells[first]) if first < len(line.cells) else ""
            if id_pattern is not None and not id_pattern.fullmatch(ident):
                continue
            if len(line.cells) != len(header.cells):
                bad.append(
                    (
                        line.line,
                        f"table line has {len(line.cells)} cells; its header (line {header.line}) has "
                        f"{len(header.cells)}",
                    )
                )
                continue
            out.append(SourceLine(line, header, source, columns))
    return out, bad


def imports(root: Path, config: Config) -> ImportResult:
    """Every row and claim of the configured tables as a record carrying its cells; each line that does not
    validate, repeats an id or has an id unfit for a file name is a problem and is left out."""
    result = ImportResult()
    for kind, model in KINDS.items():
        seen: dict[str, str] = {}
        fields = list_fields(model)
        for source in getattr(config.sources, kind).tables:
            for rel in _files(root, source.paths):
                try:
                    text = _read(root, rel)
                except (OSError, OutsideRepo) as exc:
                    result.problems.append(RecordError(rel, [(None, "", f"cannot read the record table: {exc}")]))
                    continue
                lines, bad = record_lines(text, source)
                result.problems += [RecordError(rel, [(n, "", why)]) for n, why in bad]
                if lines:
                    result.tables.add(rel)
                for sl in lines:
                    _import_line(result, kind, model, fields, rel, sl, seen)
    return result


def _import_line(
    result: ImportResult,
    kind: str,
    model: type[Row] | type[Claim],
    fields: set[str],
    rel: str,
    sl: SourceLine,
    seen: dict[str, str],
) -> None:
    data = _fields_of(sl, rel, fields)
    data["table"] = {"path": rel, "cells": cell_map(sl.header, sl.line.cells)}
    where = f"{rel}:{sl.line.line}"
    try:
        record = validate(model, data, rel)
    except RecordError as exc:
        result.problems.append(RecordError(rel, [(sl.line.line, f, m) for _, f, m in exc.problems]))
        return
    if not SAFE_ID.fullmatch(record.id):
        result.problems.append(RecordError(rel, [(sl.line.line, "id", f"{record.id!r} is not a usable file name")]))
    elif record.id in seen:
        result.problems.append(
            RecordError(rel, [(sl.line.line, "id", f"duplicate id {record.id}; first at {seen[record.id]}")])
        )
    else:
        seen[record.id] = where
        result.records.append(Imported(kind, record, rel, sl.line.line))


def _fields_of(sl: SourceLine, rel: str, fields: set[str]) -> dict[str, Any]:
    source = sl.source
    placeholders = {p.lower() for p in source.placeholders}
    data: dict[str, Any] = dict(source.values)
    for fld, idx in sl.columns.items():
        value = field_value(sl.line, idx, source.columns[fld], fld in fields, placeholders, rel)
        if value is not None:
            data[fld] = value
    return data


def record_text(imported: Imported) -> str:
    """The record file: a comment naming where it came from, then the model's fields in their order."""
    from ..yamlio import dump_yaml

    data: dict[str, Any] = imported.record.model_dump(mode="json", by_alias=True)
    head = f"# {imported.kind[:-1].capitalize()} {imported.record.id}, imported from {imported.path}:{imported.line}"
    return f"{head} by `rowgate records import`.\n" + dump_yaml(data)


# --- render -------------------------------------------------------------------------------------------------


@dataclass
class Rendered:
    old: str
    new: str
    notes: list[str] = field(default_factory=list)


def render_tables(root: Path, config: Config, records: dict[str, dict[str, Loaded]]) -> dict[str, Rendered]:
    """Each imported table file with its record lines rebuilt from `records` (kind -> id -> record).
    Records whose table line is gone are appended after the file's last record line."""
    out: dict[str, Rendered] = {}
    for kind, model in KINDS.items():
        fields = list_fields(model)
        for source in getattr(config.sources, kind).tables:
            if not source.imported:
                continue
            for rel in _files(root, source.paths):
                mine = {
                    rid: loaded.model
                    for rid, loaded in records[kind].items()
                    if loaded.model.table is not None and loaded.model.table.path == rel
                }
                done = out.get(rel)
                text = done.new if done else _read(root, rel)
                rendered = _render_file(text, rel, source, mine, fields)
                if done:
                    done.new, done.notes = rendered.new, done.notes + rendered.notes
                else:
                    out[rel] = rendered
    return out


def _render_file(text: str, rel: str, source: TableSource, mine: dict[str, Any], fields: set[str]) -> Rendered:
    result = Rendered(text, text)
    physical = text.splitlines(keepends=True)
    lines, _ = record_lines(text, source)
    used: set[str] = set()
    last_line = 0
    for sl in lines:
        ident = _ident(sl, source, fields, rel)
        last_line = sl.line.line
        record = mine.get(ident) if ident else None
        if ident is None or record is None:
            result.notes.append(f"{rel}:{sl.line.line}: {ident} has no record file; the line is kept")
            continue
        used.add(ident)
        new = _line_for(record, sl, rel, fields, result.notes)
        old = physical[sl.line.line - 1]
        body = old.rstrip("\r\n")
        if split_cells(body) != split_cells(new):
            physical[sl.line.line - 1] = new + old[len(body) :]
    extra = [r for rid, r in mine.items() if rid not in used]
    if extra and last_line:
        end = "\n"
        added = [_line_for(r, None, rel, fields, result.notes) + end for r in extra]
        physical[last_line:last_line] = added
        result.notes += [f"{rel}: {r.id} had no line; added after line {last_line}" for r in extra]
    result.new = "".join(physical)
    return result


def _ident(sl: SourceLine, source: TableSource, fields: set[str], rel: str) -> str | None:
    data = _fields_of(sl, rel, fields)
    value = data.get("id")
    return value if isinstance(value, str) else None


def _line_for(record: Any, sl: SourceLine | None, rel: str, fields: set[str], notes: list[str]) -> str:
    table: TableCells = record.table
    if sl is None:
        return "| " + " | ".join(table.cells.values()) + " |"
    keys = _keys(sl.header)
    cells = [table.cells.get(k, "") for k in keys]
    lost = [k for k in table.cells if k not in keys]
    if lost:  # the header was renamed since the import: say which cells have no column now
        notes.append(f"{rel}: {record.id}: no column {', '.join(repr(k) for k in lost)} in the table; not written")
    source = sl.source
    placeholders = {p.lower() for p in source.placeholders}
    for fld, idx in sl.columns.items():
        if not idx:
            continue
        want = _want(record, fld)
        col = source.columns[fld]
        now = _now(cells, idx, col, fld in fields, placeholders, rel, source.values.get(fld))
        if want == now:
            continue
        if fld in fields:
            cells[idx[0]] = _add_items(cells[idx[0]], [w for w in want if w not in now], placeholders)
            gone = [n for n in now if n not in want]
            for item in gone:
                cells[idx[0]] = _drop_item(cells[idx[0]], item)
            still = [n for n in _now(cells, idx, col, True, placeholders, rel, None) or [] if n not in want]
            if still:
                notes.append(f"{rel}: {record.id}: {fld} {', '.join(still)} left the record; edit the cell by hand")
        else:
            cells[idx[0]] = _set_value(cells[idx[0]], want, col, rel)
            if _now(cells, idx, col, False, placeholders, rel, source.values.get(fld)) != want:
                notes.append(f"{rel}: {record.id}: the {fld} cell cannot show {want!r}; edit it by hand")
    return "| " + " | ".join(cells) + " |"


def _want(record: Any, fld: str) -> Any:
    value = getattr(record, fld, None)
    if isinstance(value, list):
        return [str(v) for v in value]
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return value


def _now(
    cells: list[str],
    idx: list[int],
    col: TableColumn,
    is_list: bool,
    placeholders: set[str],
    rel: str,
    default: str | None,
) -> Any:
    line = TableLine(0, tuple(cells), "")
    value = field_value(line, idx, col, is_list, placeholders, rel)
    return default if value is None and default is not None else value


def _add_items(cell: str, items: list[str], placeholders: set[str]) -> str:
    if not items:
        return cell
    spans = ", ".join(f"`{i}`" for i in items)
    return spans if clean(cell).lower() in placeholders else f"{cell}, {spans}"


def _drop_item(cell: str, item: str) -> str:
    """The cell without the code span `item` and its comma (other text is left alone); "-" when empty."""
    span = re.escape(f"`{item}`")
    out = re.sub(rf"{span}\s*,\s*|\s*,\s*{span}|{span}", "", cell, count=1)
    return out if out.strip() else "-"


def _set_value(cell: str, want: Any, col: TableColumn, rel: str) -> str:
    if want is None:
        return "-"
    text = str(want)
    if col.relative:
        text = posixpath.relpath(text, posixpath.dirname(rel) or ".")
    if col.pattern is not None:
        m = compile_pattern(col.pattern).search(cell)
        if m is not None:
            group = 1 if m.groups() else 0
            return cell[: m.start(group)] + text + cell[m.end(group) :]
        return f"`{text}`"
    stripped = cell.strip()
    if stripped.startswith("`") and stripped.endswith("`"):
        return f"`{text}`"
    return text
