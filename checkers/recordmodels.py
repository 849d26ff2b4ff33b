"""The record models: rows, claims, issue intake records, ledger entries, specs, and the loaded set.

Apart from their loading (checkers.records) so that the table sources (checkers.recordsources) build the
same models without importing the loader that calls them."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, model_validator

from .config import State, Strict
from .ledger_schema import LegacyDirty, Trimmed
from .yamlio import RecordError


class Blocker(Strict):
    reason: str = Field(min_length=1)
    unblock_when: str = Field(min_length=1, description="the condition that unblocks the row")


class TableCells(Strict):
    """The markdown table line a record was imported from (`rowgate records import`): every cell as written,
    by its header, so that `rowgate render --tables` writes the line back without losing a column."""

    path: str = Field(min_length=1, description="the table's file")
    cells: dict[str, str] = Field(description="header (as written; a repeated one gets ' #2') -> cell text")


class Row(Strict):
    id: str = Field(min_length=1, description="fully matches rows.id_pattern (checked when records load)")
    area: str
    title: str = Field(min_length=1)
    state: State = Field(min_length=1, description="one of rows.state_order (checked when records load)")
    anchors: list[str] = Field(
        default_factory=list, description="code and test paths, optionally path:line or path:line,line"
    )
    spec: str | None = None
    issues: list[int] = Field(default_factory=list)
    claim: str | None = None
    evidence: list[str] = Field(default_factory=list, description="ledger entry paths")
    closing_commit: str | None = Field(None, pattern=r"^[0-9a-f]{7,40}$")
    blocker: Blocker | None = None
    table: TableCells | None = None


class Claim(Strict):
    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    row: str | None = Field(None, min_length=1, description="the row claimed")
    rows: list[str] = Field(default_factory=list, description="further rows of the same claim")
    branch: str = Field(min_length=1)
    owner: str = Field(min_length=1)
    since: dt.date
    table: TableCells | None = None

    @model_validator(mode="after")
    def _names_a_row(self) -> Claim:
        if self.row is None and not self.rows:
            raise ValueError("a claim names at least one row (row: or rows:)")
        return self

    @property
    def row_ids(self) -> list[str]:
        """Every row the claim holds, the `row:` first."""
        return list(dict.fromkeys(([self.row] if self.row else []) + self.rows))


class IssueRecord(Strict):
    number: int = Field(gt=0)
    row: str = Field(min_length=1)
    filed: dt.date
    title: str | None = None
    state: Literal["open", "closed"] = "open"  # closed in the change that closes it (`Closes #N`, pr-body)


class LedgerEntry(Strict):
    schema_: Literal[1] = Field(alias="schema")
    date: dt.date
    kind: Literal["gate", "bench", "flip", "note"]
    rows: list[str] = Field(min_length=1)
    command: str = Field(min_length=1, description="the exact command that reproduces the entry")
    sha: str | None = None
    device: str | None = None
    summary: str = Field(min_length=1)
    trimmed: Trimmed | None = None
    dirty: LegacyDirty | None = None  # a `-dirty` sha: what history shows of the tree
    results: Any = None

    @model_validator(mode="after")
    def _dirty_names_the_commit(self) -> LedgerEntry:
        if self.dirty is not None:
            base = (self.sha or "").removesuffix("-dirty")
            if self.sha is None or not self.sha.endswith("-dirty"):
                raise ValueError("`dirty` describes a record whose sha ends in -dirty")
            if not self.dirty.range.startswith(base + ".."):
                raise ValueError(f"`dirty.range` starts at the measured commit {base[:12]}")
        return self


@dataclass
class Spec:
    path: str
    sections: dict[str, int]  # heading -> line
    issues: set[int]


@dataclass
class Loaded:
    """A record that validated, with its repository-relative path and its round-trip document (for a
    table line: a TablePosition, and `line` is the line)."""

    path: str
    model: Any
    doc: Any = None
    line: int | None = None


class _LineMap:
    def __init__(self, line: int):
        self.line = line - 1  # 0-based, as ruamel's

    def key(self, key: Any) -> tuple[int, int]:
        return (self.line, 0)

    def item(self, index: int) -> tuple[int, int]:
        return (self.line, 0)


class TablePosition:
    """Where a table-line record is, answering `lc.key(...)` as a ruamel map does, so that every field
    of the record is placed at its table line."""

    def __init__(self, line: int):
        self.lc = _LineMap(line)


@dataclass
class Records:
    rows: dict[str, Loaded] = field(default_factory=dict)
    claims: dict[str, Loaded] = field(default_factory=dict)
    issues: list[Loaded] = field(default_factory=list)
    ledger: dict[str, Loaded] = field(default_factory=dict)
    specs: dict[str, Spec] = field(default_factory=dict)  # by path
    problems: list[RecordError] = field(default_factory=list)
    tables: dict[str, list[str]] = field(default_factory=dict)  # record table file -> the row ids read from it

    @property
    def examined(self) -> int:
        return len(self.rows) + len(self.claims) + len(self.issues) + len(self.ledger) + len(self.specs)
