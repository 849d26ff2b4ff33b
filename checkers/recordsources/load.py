"""Records from the configured markdown tables into `Records`, validated by the same models as record files.

Each table line that fails validation, or repeats an id already read (from a file or another table), is a
problem at its `path:line` and is not a record; the others are ordinary records whose every field sits at
their table line.
"""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel

from ..config import SourcesConfig, TableSource
from ..recordmodels import Claim, IssueRecord, LedgerEntry, Loaded, Records, Row, TablePosition
from ..results import RecordError
from ..yamlio import validate
from .mapping import TableRecord, read_source


def list_fields(model: type[BaseModel]) -> set[str]:
    """The fields of `model` that hold lists (a table cell gives several values for them)."""
    return {
        info.alias or name for name, info in model.model_fields.items() if typing.get_origin(info.annotation) is list
    }


def load_tables(rec: Records, root: Any, sources: SourcesConfig) -> None:
    _rows(rec, root, sources.rows.tables)
    for item, loaded in _each(rec, root, sources.claims.tables, Claim):
        first = rec.claims.get(loaded.model.id)
        if first is not None:
            _duplicate(rec, item, f"claim {loaded.model.id}", first)
        else:
            rec.claims[loaded.model.id] = loaded
    for _, loaded in _each(rec, root, sources.issues.tables, IssueRecord):
        rec.issues.append(loaded)
    for _, loaded in _each(rec, root, sources.ledger.tables, LedgerEntry):
        rec.ledger[f"{loaded.path}:{loaded.line}"] = loaded


def _rows(rec: Records, root: Any, tables: list[TableSource]) -> None:
    for item, loaded in _each(rec, root, tables, Row):
        first = rec.rows.get(loaded.model.id)
        if first is not None:
            _duplicate(rec, item, f"row id {loaded.model.id}", first)
        else:
            rec.rows[loaded.model.id] = loaded
            rec.tables.setdefault(item.path, []).append(loaded.model.id)


def _each(
    rec: Records, root: Any, tables: list[TableSource], model: type[BaseModel]
) -> typing.Iterator[tuple[TableRecord, Loaded]]:
    fields = list_fields(model)
    for source in tables:
        if source.imported:  # its records are record files now; the table is only written back
            continue
        read = read_source(root, source, fields)
        rec.problems += read.problems
        for item in read.records:
            try:
                obj = validate(model, item.data, item.path)
            except RecordError as exc:
                rec.problems.append(RecordError(item.path, [(item.line, f, m) for _, f, m in exc.problems]))
                continue
            yield item, Loaded(item.path, obj, TablePosition(item.line), item.line)


def _duplicate(rec: Records, item: TableRecord, what: str, first: Loaded) -> None:
    where = f"{first.path}:{first.line}" if first.line else first.path
    rec.problems.append(RecordError(item.path, [(item.line, "id", f"duplicate {what}; first at {where}")]))
