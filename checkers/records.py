"""The `.agents/` records: rows, specs, claims, issue intake records and ledger entries.

One file per record, so no change has to edit a shared table. Loading never raises on a bad
record: each problem is kept as a RecordError (file, line, field) for the agent-record check to report,
and the records that did load stay usable by every other check.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from .config import State, Strict
from .ids import ROW_ID, SHA
from .yamlio import RecordError, load_model, load_text, validate

AGENTS = ".agents"
_ISSUE_REF = re.compile(r"(?<![\w&])#(\d+)\b")
_HEADING = re.compile(r"^##\s+(.+?)\s*$")


class Blocker(Strict):
    reason: str = Field(min_length=1)
    unblock_when: str = Field(min_length=1, description="the condition that unblocks the row")


class Row(Strict):
    id: str = Field(pattern=ROW_ID)
    area: str
    title: str = Field(min_length=1)
    state: State
    anchors: list[str] = Field(default_factory=list, description="code and test paths, optionally path:line")
    spec: str | None = None
    issues: list[int] = Field(default_factory=list)
    claim: str | None = None
    evidence: list[str] = Field(default_factory=list, description="ledger entry paths")
    closing_commit: str | None = Field(None, pattern=SHA)
    blocker: Blocker | None = None


class Claim(Strict):
    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    row: str = Field(pattern=ROW_ID)
    branch: str = Field(min_length=1)
    owner: str = Field(min_length=1)
    since: dt.date


class IssueRecord(Strict):
    number: int = Field(gt=0)
    row: str = Field(pattern=ROW_ID)
    filed: dt.date
    title: str | None = None


class LedgerEntry(Strict):
    schema_: Literal[1] = Field(alias="schema")
    date: dt.date
    kind: Literal["gate", "bench", "flip", "note"]
    rows: list[str] = Field(min_length=1)
    command: str = Field(min_length=1, description="the exact command that reproduces the entry")
    sha: str | None = None
    device: str | None = None
    summary: str = Field(min_length=1)
    results: Any = None


@dataclass
class Spec:
    path: str
    sections: dict[str, int]  # heading -> line
    issues: set[int]


@dataclass
class Loaded:
    """A record that validated, with its repository-relative path and its round-trip document."""

    path: str
    model: Any
    doc: Any = None


@dataclass
class Records:
    rows: dict[str, Loaded] = field(default_factory=dict)
    claims: dict[str, Loaded] = field(default_factory=dict)
    issues: list[Loaded] = field(default_factory=list)
    ledger: dict[str, Loaded] = field(default_factory=dict)
    specs: dict[str, Spec] = field(default_factory=dict)  # by path
    problems: list[RecordError] = field(default_factory=list)

    @property
    def examined(self) -> int:
        return len(self.rows) + len(self.claims) + len(self.issues) + len(self.ledger) + len(self.specs)


def load_records(root: Path) -> Records:
    rec = Records()
    base = root / AGENTS
    for path in sorted((base / "rows").glob("*.yaml")):
        loaded = _load(rec, root, path, Row)
        if loaded and loaded.model.id != path.stem:
            rec.problems.append(
                RecordError(
                    loaded.path,
                    [
                        (
                            key_line(loaded.doc, "id"),
                            "id",
                            f"{loaded.model.id!r} does not match the file name {path.stem!r}",
                        )
                    ],
                )
            )
        elif loaded:
            rec.rows[loaded.model.id] = loaded
    for path in sorted((base / "claims").glob("*.yaml")):
        loaded = _load(rec, root, path, Claim)
        if loaded:
            rec.claims[loaded.model.id] = loaded
    for path in sorted((base / "issues").glob("*/ISSUE-*.md")):
        loaded = _load_front_matter(rec, root, path)
        if loaded:
            rec.issues.append(loaded)
    for path in sorted((base / "ledger").glob("*.json")):
        loaded = _load(rec, root, path, LedgerEntry)
        if loaded:
            rec.ledger[loaded.path] = loaded
    for path in sorted((base / "specs").glob("*.md")):
        text = _read_text(rec, root, path)
        if text is not None:
            spec = parse_spec(text, _rel(root, path))
            rec.specs[spec.path] = spec
    return rec


def parse_spec(text: str, path: str) -> Spec:
    sections, issues = {}, set()
    for n, line in enumerate(text.splitlines(), 1):
        if m := _HEADING.match(line):
            sections[m.group(1)] = n
    issues = {int(m) for m in _ISSUE_REF.findall(text)}
    return Spec(path, sections, issues)


def _rel(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def _read_text(rec: Records, root: Path, path: Path) -> str | None:
    """A markdown record's text, read bounded and inside the repository; a refusal (too big, a link out,
    a directory or FIFO named like a record, invalid UTF-8) is one problem of that record, not a stop."""
    from .boundedio import RECORD_CAP, Unreadable, read_text

    rel = _rel(root, path)
    try:
        return read_text(path, RECORD_CAP, root, rel).replace("\r\n", "\n")
    except (Unreadable, FileNotFoundError) as exc:
        rec.problems.append(RecordError(rel, [(None, "", getattr(exc, "why", "file not found"))]))
        return None


def _load(rec: Records, root: Path, path: Path, model: type[BaseModel]) -> Loaded | None:
    # JSON ledger entries are read by the YAML loader too: JSON is YAML, and it keeps line numbers.
    try:
        obj, doc = load_model(model, path, _rel(root, path), root)
    except RecordError as exc:
        rec.problems.append(exc)
        return None
    return Loaded(_rel(root, path), obj, doc)


def _load_front_matter(rec: Records, root: Path, path: Path) -> Loaded | None:
    rel = _rel(root, path)
    text = _read_text(rec, root, path)
    if text is None:
        return None
    if not text.startswith("---\n") or "\n---\n" not in text[4:]:
        rec.problems.append(RecordError(rel, [(1, "", "missing YAML front matter (--- number/row/filed ---)")]))
        return None
    head = text[4 : text.index("\n---\n", 4)]
    try:
        doc = load_text(head, rel)
        obj = validate(IssueRecord, doc, rel)
    except RecordError as exc:
        # front matter starts on line 2 of the file
        exc.problems = [((ln + 1) if ln else ln, f, m) for ln, f, m in exc.problems]
        rec.problems.append(exc)
        return None
    except Exception as exc:  # noqa: BLE001 -- ruamel raises several unrelated error types for broken YAML
        rec.problems.append(RecordError(rel, [(1, "", f"invalid front matter: {exc}")]))
        return None
    return Loaded(rel, obj, doc)


def key_line(doc: Any, key: str) -> int | None:
    try:
        return int(doc.lc.key(key)[0]) + 1
    except (AttributeError, KeyError, TypeError, IndexError):  # not a ruamel map, or no such key
        return None
