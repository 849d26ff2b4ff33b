"""The `.agents/` records: rows, specs, claims, issue intake records and ledger entries.

One file per record by default, so no change has to edit a shared table; a repository that keeps its
records as markdown tables names them in the config (`sources:`, read by checkers.recordsources). Loading
never raises on a bad record: each problem is kept as a RecordError (file, line, field) for the agent-record check to report,
and the records that did load stay usable by every other check.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from .config import Config, KindSource
from .recordmodels import (
    Blocker,
    Claim,
    IssueRecord,
    LedgerEntry,
    Loaded,
    Records,
    Row,
    Spec,
    TableCells,
    TablePosition,
)
from .yamlio import MAX_YAML_BYTES, RecordError, validate

if TYPE_CHECKING:
    from .recordcache import ParsedCache

# The models live in checkers.recordmodels; their names stay public here too, beside the loader's.
__all__ = [
    "AGENTS",
    "Blocker",
    "Claim",
    "IssueRecord",
    "LedgerEntry",
    "Loaded",
    "Records",
    "Row",
    "Spec",
    "TableCells",
    "TablePosition",
    "load_records",
    "check_rows",
    "parse_spec",
    "load_json_model",
    "key_line",
]

AGENTS = ".agents"
_ISSUE_REF = re.compile(r"(?<![\w&])#(\d+)\b")
_HEADING = re.compile(r"^##\s+(.+?)\s*$")
M = TypeVar("M", bound=BaseModel)


def load_records(root: Path, config: Config | None = None) -> Records:
    """Every record, from the places `config.sources` names (default: one file per record under .agents/)."""
    from .recordcache import ParsedCache

    config = config if config is not None else Config()
    sources = config.sources
    rec = Records()
    base = root / AGENTS
    with ParsedCache.of(root) as cache:
        _files_of(
            rec,
            root,
            base,
            cache,
            *(_reads_files(k) for k in (sources.rows, sources.claims, sources.issues, sources.ledger)),
        )
    if any(k.tables for k in (sources.rows, sources.claims, sources.issues, sources.ledger)):
        from .recordsources.load import load_tables  # only where the config names record tables

        load_tables(rec, root, sources)
    check_rows(rec, config)
    for path in sorted((base / "specs").glob("*.md")):
        text = _read_text(rec, root, path)
        if text is not None:
            spec = parse_spec(text, _rel(root, path))
            rec.specs[spec.path] = spec
    return rec


def _reads_files(kind: KindSource) -> KindSource:
    """A kind whose tables were imported reads its record files, whatever `files` says."""
    if kind.files or not any(t.imported for t in kind.tables):
        return kind
    return kind.model_copy(update={"files": True})


def check_rows(rec: Records, config: Config) -> None:
    """Each row's id and state against the configured id pattern and states; a row that fails is a
    problem and is no record."""
    from .ids import ROW_ID
    from .safe_regex import compile_pattern  # a configured pattern runs under a time limit

    # the default is rowgate's own, linear pattern: it runs on `re`, outside the configured patterns' budget
    pattern = compile_pattern(config.rows.id_pattern, trusted=config.rows.id_pattern == ROW_ID)
    states = config.rows.state_order
    for row_id, loaded in list(rec.rows.items()):
        bad: list[tuple[int | None, str, str]] = []
        if not pattern.fullmatch(row_id):
            bad.append((key_line(loaded.doc, "id"), "id", f"{row_id!r} does not match rows.id_pattern"))
        if loaded.model.state not in states:
            bad.append(
                (key_line(loaded.doc, "state"), "state", f"{loaded.model.state!r} is not one of {', '.join(states)}")
            )
        if bad:
            rec.problems.append(RecordError(loaded.path, bad))
            del rec.rows[row_id]


def _files_of(
    rec: Records,
    root: Path,
    base: Path,
    cache: ParsedCache,
    rows: KindSource,
    claims: KindSource,
    issues: KindSource,
    ledger: KindSource,
) -> None:
    if not rows.files:
        return _claims_issues_ledger(rec, root, base, cache, claims, issues, ledger)
    for path in sorted((base / "rows").glob("*.yaml")):
        loaded = _load(rec, root, path, Row, cache)
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
            if loaded.model.table is not None:  # imported from a table: counted with that table's rows
                rec.tables.setdefault(loaded.model.table.path, []).append(loaded.model.id)
    return _claims_issues_ledger(rec, root, base, cache, claims, issues, ledger)


def _claims_issues_ledger(
    rec: Records,
    root: Path,
    base: Path,
    cache: ParsedCache,
    claims: KindSource,
    issues: KindSource,
    ledger: KindSource,
) -> None:
    for path in sorted((base / "claims").glob("*.yaml")) if claims.files else []:
        loaded = _load(rec, root, path, Claim, cache)
        if loaded:
            rec.claims[loaded.model.id] = loaded
    for path in sorted((base / "issues").glob("*/ISSUE-*.md")) if issues.files else []:
        loaded = _load_front_matter(rec, root, path, cache)
        if loaded:
            rec.issues.append(loaded)
    for path in sorted((base / "ledger").glob("*.json")) if ledger.files else []:
        loaded = _load(rec, root, path, _ledger_model(path), cache)
        if loaded:
            rec.ledger[loaded.path] = loaded


def parse_spec(text: str, path: str) -> Spec:
    sections, issues = {}, set()
    for n, line in enumerate(text.splitlines(), 1):
        if m := _HEADING.match(line):
            sections[m.group(1)] = n
    issues = {int(m) for m in _ISSUE_REF.findall(text)}
    return Spec(path, sections, issues)


def _rel(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


_SCHEMA_2 = re.compile(rb'^\s*\{\s*"schema"\s*:\s*2\s*[,}]')


def _ledger_model(path: Path) -> type[BaseModel]:
    """A ledger entry's model by its `schema`, which writers put first: 2 (with provenance,
    checkers.ledger_schema) or 1 (legacy). A record that puts it later is judged as schema 1 and told so."""
    from .ledger_schema import LedgerRecord2

    if path.is_symlink() or not path.is_file():
        return LedgerEntry  # the bounded loader refuses a link or a non-file and reports it; read nothing here
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return LedgerEntry  # the loader reports the unreadable file
    return LedgerRecord2 if _SCHEMA_2.match(head) else LedgerEntry


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


def _load(rec: Records, root: Path, path: Path, model: type[BaseModel], cache: ParsedCache) -> Loaded | None:
    try:
        if path.suffix == ".json":
            obj, doc = load_json_model(model, path, _rel(root, path), root)
        else:
            obj, doc = cache.load_model(model, path, _rel(root, path), root)
    except RecordError as exc:
        rec.problems.append(exc)
        return None
    return Loaded(_rel(root, path), obj, doc)


class JsonDoc(dict[str, Any]):
    """A JSON record as loaded, and its text, for the line of a key (looked up only for a message)."""

    text: str = ""

    def line(self, key: str) -> int | None:
        m = re.search(rf"^[ \t]*{re.escape(json.dumps(key))}[ \t]*:", self.text, re.M)
        return self.text.count("\n", 0, m.start()) + 1 if m else None


def load_json_model(model: type[M], path: Path, display: str, root: Path | None = None) -> tuple[M, JsonDoc]:
    """Read one JSON record with `json` (the round-trip YAML loader takes 300x longer on the 2.8 MB ledger)
    and validate it with the schema; errors name the line of the top-level key they are under. The same
    size bound as a YAML record; nesting too deep for the parser is refused, not a crash."""
    from .boundedio import Unreadable, read_bytes

    try:  # bounded before reading, and (with `root`) only a regular file inside the repository
        raw = read_bytes(path, MAX_YAML_BYTES, root, display)
    except FileNotFoundError:
        raise RecordError(display, [(None, "", "file not found")]) from None
    except Unreadable as exc:
        raise RecordError(display, [(None, "", exc.why)]) from None
    try:
        text = raw.decode("utf-8")
        data = json.loads(text)
    except UnicodeDecodeError as exc:
        raise RecordError(display, [(None, "", f"not UTF-8 text ({exc.reason})")]) from None
    except json.JSONDecodeError as exc:
        raise RecordError(display, [(exc.lineno, "", f"invalid JSON: {exc.msg}")]) from None
    except RecursionError:
        raise RecordError(display, [(None, "", "invalid JSON: nested too deep")]) from None
    if not isinstance(data, dict):
        raise RecordError(display, [(1, "", f"a record is a JSON object, not {type(data).__name__}")])
    doc = JsonDoc(data)
    doc.text = text
    try:
        return validate(model, data, display, plain=True), doc
    except RecordError as exc:
        exc.problems = [
            (line if line else doc.line(field.split(".", 1)[0]), field, msg) for line, field, msg in exc.problems
        ]
        raise RecordError(display, exc.problems) from None


def _load_front_matter(rec: Records, root: Path, path: Path, cache: ParsedCache) -> Loaded | None:
    rel = _rel(root, path)
    text = _read_text(rec, root, path)
    if text is None:
        return None
    if not text.startswith("---\n") or "\n---\n" not in text[4:]:
        rec.problems.append(RecordError(rel, [(1, "", "missing YAML front matter (--- number/row/filed ---)")]))
        return None
    head = text[4 : text.index("\n---\n", 4)]
    try:
        obj, doc = cache.load_text_model(IssueRecord, head, rel)
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
    if isinstance(doc, JsonDoc):
        return doc.line(key)
    try:
        return int(doc.lc.key(key)[0]) + 1
    except (AttributeError, KeyError, TypeError, IndexError):  # not a ruamel map, or no such key
        return None
