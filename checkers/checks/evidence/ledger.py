"""The ledger as the evidence check reads it: every record's provenance (schema 1 or 2), the numbers it holds,
and the commits that changed what it measured since its commit.

Records are read with `json` (236 records take milliseconds; ruamel would take seconds); only schema-2 records
are validated with the pydantic model.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ...atomicio import write_atomic
from ...boundedio import RECORD_CAP, Unreadable, read_bytes
from ...contentcache import ContentCache, validator_stamps
from ...flagdecls import FlagDecl
from ...gitio import Git

_SHA = frozenset("0123456789abcdef")


class Record:
    """One ledger file as read: its name, size, data, and what it says about its origin."""

    def __init__(self, name: str, path: str, size: int, data: dict[str, Any], digest: str = ""):
        self.name, self.path, self.size, self.data = name, path, size, data
        self.digest = digest  # sha256 of a schema-2 record's bytes: the key of its validation in the cache
        self._values: list[float] | None = None

    @property
    def schema(self) -> int:
        return 2 if self.data.get("schema") == 2 else 1

    @property
    def date(self) -> str:
        return str(self.data.get("date", ""))

    @property
    def commit(self) -> str | None:
        """The full sha measured; a legacy `sha-dirty` names its commit too."""
        sha = self.data.get("commit") if self.schema == 2 else self.data.get("sha")
        if not isinstance(sha, str):
            return None
        sha = sha.removesuffix("-dirty")
        return sha if len(sha) == 40 and set(sha) <= _SHA else None

    @property
    def dirty(self) -> bool | None:
        """True from a dirty tree, None when the record cannot say (a legacy record without a sha)."""
        if self.schema == 2:
            return not self.data.get("clean", False)
        sha = self.data.get("sha")
        return sha.endswith("-dirty") if isinstance(sha, str) else None

    @property
    def flags(self) -> dict[str, Any] | None:
        flags = self.data.get("flags") if self.schema == 2 else None
        return flags if isinstance(flags, dict) else None

    @property
    def rows(self) -> list[str]:
        rows = self.data.get("rows")
        return [r for r in rows if isinstance(r, str)] if isinstance(rows, list) else []

    def tree(self) -> str:
        """How a dated label writes the record's tree: `17944c8`, `03b4428 dirty`, or `no-sha`."""
        if self.commit is None:
            return "no-sha"
        return self.commit[:7] + (" dirty" if self.dirty else "")

    def values(self) -> list[float]:
        """The numbers a citation may print: a schema-2 record's figures; anything in a legacy record (its
        numeric fields and the numbers written in its strings)."""
        if self._values is None:
            out: list[float] = []
            if self.schema == 2:  # a schema-2 record stands behind its figures only, not its raw results
                _collect([f.get("value") for f in self.data.get("figures") or [] if isinstance(f, dict)], out)
            else:  # `trimmed` says what a trim dropped: sizes and counts, not figures a document may cite
                _collect({k: v for k, v in self.data.items() if k != "trimmed"}, out)
            self._values = out
        return self._values

    def holds(self, printed: str) -> bool:
        """The record holds the printed number to its printed precision (a percentage also as a fraction)."""
        value = float(printed.replace(",", ""))
        decimals = len(printed.partition(".")[2])
        tol = 0.5 * 10.0**-decimals + 1e-9 * abs(value)
        return any(abs(v - value) <= tol or abs(v * 100 - value) <= tol for v in self.values())


def _collect(node: Any, out: list[float]) -> None:
    from .citations import NUMBER

    if isinstance(node, bool):
        return
    if isinstance(node, int | float):
        out.append(float(node))
    elif isinstance(node, str):
        out += [float(n.replace(",", "")) for n in NUMBER.findall(node)]
    elif isinstance(node, dict):
        for v in node.values():
            _collect(v, out)
    elif isinstance(node, list):
        for v in node:
            _collect(v, out)


def read_ledger(root: Path, ledger_dir: str) -> tuple[dict[str, Record], list[tuple[str, str]]]:
    """Every `<name>.json` under `ledger_dir` by name, and (path, problem) for each that does not parse."""
    records: dict[str, Record] = {}
    problems: list[tuple[str, str]] = []
    base = root / ledger_dir
    for entry in sorted(os.scandir(base), key=lambda e: e.name) if base.is_dir() else []:
        if not entry.name.endswith(".json") or not entry.is_file(follow_symlinks=False):
            continue
        rel = f"{ledger_dir.rstrip('/')}/{entry.name}"
        try:  # bounded, and only a regular file inside the repository
            raw = read_bytes(Path(entry.path), RECORD_CAP, root, rel)
        except (Unreadable, FileNotFoundError) as exc:
            problems.append((rel, getattr(exc, "why", "file not found")))
            continue
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, ValueError) as exc:
            problems.append((rel, f"not JSON: {exc}"))
            continue
        if not isinstance(data, dict):
            problems.append((rel, "not a JSON object"))
            continue
        digest = hashlib.sha256(raw).hexdigest() if data.get("schema") == 2 else ""
        records[entry.name[:-5]] = Record(entry.name[:-5], rel, len(raw), data, digest)
    return records, problems


class ValidCache:
    """The schema-2 records that validated before, by the sha256 of their bytes under a stamp of the schema's
    source and the validating libraries, kept under the git directory: a run whose records all validated
    before imports no pydantic (a quarter of a second). Only a valid record is cached."""

    def __init__(self, path: Path | None):
        self.path = path
        self.stamp = hashlib.sha256(_stamp().encode("utf-8", "surrogateescape")).hexdigest()
        self.known: set[str] = set()
        self.added = False
        text = _read_text(path) if path is not None else None
        if text and text.startswith(self.stamp + "\n"):
            self.known = set(text.split("\n")[1:]) - {""}

    def problems(self, record: Record) -> list[str]:
        if record.digest and record.digest in self.known:
            return []
        found = validate_v2(record)
        if not found and record.digest:
            self.known.add(record.digest)
            self.added = True
        return found

    def save(self) -> None:
        if self.path is None or not self.added:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path, self.stamp + "\n" + "\n".join(sorted(self.known)) + "\n")
        except OSError:
            pass  # a read-only git directory: the next run validates again


def _stamp() -> str:
    schema = Path(__file__).resolve().parents[2] / "ledger_schema.py"
    return "\0".join([schema.read_text(encoding="utf-8"), *validator_stamps()])


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def validate_v2(record: Record) -> list[str]:
    """A schema-2 record's problems against checkers.ledger_schema (empty: valid)."""
    from pydantic import ValidationError

    from ...ledger_schema import LedgerRecord2

    try:
        LedgerRecord2.model_validate(record.data)
    except ValidationError as exc:
        return [f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}" for e in exc.errors()]
    return []


def today_defaults(decls: list[FlagDecl]) -> dict[str, bool | str]:
    """Each declared flag's default as a record stores it (a boolean, or the string)."""
    out: dict[str, bool | str] = {}
    for d in decls:
        out[d.name] = True if d.default == "ON" else False if d.default == "OFF" else str(ast.literal_eval(d.default))
    return out


def flag_differences(flags: dict[str, Any], defaults: dict[str, bool | str]) -> list[str]:
    """`NAME=value (default D)` for each flag the record ran other than today's default, or did not record."""
    out = []
    for name, default in sorted(defaults.items()):
        if name not in flags:
            out.append(f"{name} unrecorded (default {_shown(default)})")
        elif flags[name] != default:
            out.append(f"{name}={_shown(flags[name])} (default {_shown(default)})")
    return out


def _shown(v: Any) -> str:
    return ("1" if v else "0") if isinstance(v, bool) else str(v)


class Measured:
    """What a record measured (its rows' anchors, and the paths it names) and what changed there since.

    The history is read once (two `git log` processes for the whole of it), then each record's commits since
    are the commits HEAD reaches and its commit does not: no process per record."""

    def __init__(self, root: Path, git: Git, rows_dir: str | None, cache: ContentCache | None = None):
        self.root, self.git, self.rows_dir = root, git, rows_dir
        self.cache = cache  # each commit's changed paths, by its sha (a commit never changes)
        self._anchors: dict[str, list[str]] = {}
        self._since: dict[str, list[str] | None] = {}
        self._log: list[tuple[str, tuple[str, ...], str]] | None = None  # (sha, parents, subject), newest first
        self._changed: dict[str, list[str]] = {}

    def paths(self, record: Record) -> list[str]:
        named = record.data.get("paths") if record.schema == 2 else None
        out = [p for p in named if isinstance(p, str)] if isinstance(named, list) else []
        for row in record.rows:
            out += self._row_anchors(row)
        return sorted({p.split(":", 1)[0] for p in out if p})

    def in_history(self, record: Record) -> bool:
        """The record's commit is one HEAD reaches (not a shallow clone's cut, a rewritten or a foreign sha)."""
        return record.commit is not None and any(sha == record.commit for sha, _, _ in self._history())

    def changes_since(self, record: Record) -> list[str] | None:
        """`short subject` of each commit after the record's that changed a measured path, newest first;
        None when the record names no commit in this history, or measured nothing."""
        if record.name not in self._since:
            self._since[record.name] = self._changes(record)
        return self._since[record.name]

    def _changes(self, record: Record) -> list[str] | None:
        paths = self.paths(record)
        log = self._history()
        parents = {sha: ps for sha, ps, _ in log}
        if record.commit is None or not paths or record.commit not in parents:
            return None  # no commit, or one this history does not have (rewritten, or foreign)
        before = _ancestors(record.commit, parents)
        prefixes = tuple(p.rstrip("/") + "/" for p in paths)
        exact = set(paths)
        return [
            f"{sha[:7]} {subject}"
            for sha, _, subject in log
            if sha not in before and any(c in exact or c.startswith(prefixes) for c in self._changed.get(sha, ()))
        ]

    def _history(self) -> list[tuple[str, tuple[str, ...], str]]:
        if self._log is None:
            out = self.git.text("log", "--format=%H%x01%P%x01%s", "HEAD")
            self._log = []
            for line in out.splitlines():
                sha, ps, subject = (line.split("\x01") + ["", ""])[:3]
                self._log.append((sha, tuple(ps.split()), subject))
            self._changed = self._changed_paths([sha for sha, _, _ in self._log])
        return self._log

    def _changed_paths(self, shas: list[str]) -> dict[str, list[str]]:
        """Each commit's changed paths: from the cache for the commits it has, one `git log` for the rest."""
        if self.cache is None:
            return self.git.changed_paths("HEAD")
        changed: dict[str, list[str]] = {}
        missing = []
        for sha in shas:
            paths = self.cache.get(sha)
            if isinstance(paths, list) and all(isinstance(p, str) for p in paths):
                changed[sha] = paths
            else:
                missing.append(sha)
        fresh = self.git.changed_paths_of(missing)
        for sha in missing:
            changed[sha] = fresh.get(sha, [])
            if sha in fresh:  # only what git said is kept
                self.cache.put(sha, changed[sha])
        self.cache.save()
        return changed

    def _row_anchors(self, row: str) -> list[str]:
        if self.rows_dir is None:
            return []
        if row not in self._anchors:
            path = self.root / self.rows_dir / f"{row}.yaml"
            self._anchors[row] = row_anchors(path.read_text(encoding="utf-8")) if path.is_file() else []
        return self._anchors[row]


def _ancestors(sha: str, parents: dict[str, tuple[str, ...]]) -> set[str]:
    seen, todo = {sha}, [sha]
    while todo:
        for p in parents.get(todo.pop(), ()):
            if p not in seen:
                seen.add(p)
                todo.append(p)
    return seen


def row_anchors(text: str) -> list[str]:
    """The `anchors:` list of a row file, block (`- path`) or flow (`[a, b]`) style, read line by line: ruamel
    would cost a tenth of a second per row, and a row that does not parse is agent-record's finding."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("anchors:"):
            continue
        rest = line[len("anchors:") :].split(" #", 1)[0].strip()
        if rest.startswith("["):
            return [_unquote(a) for a in rest.strip("[]").split(",") if a.strip()]
        out = []
        for item in lines[i + 1 :]:
            stripped = item.strip()
            if not stripped.startswith("- "):
                if stripped and not stripped.startswith("#"):
                    break
                continue
            out.append(_unquote(stripped[2:].split(" #", 1)[0]))
        return out
    return []


def _unquote(text: str) -> str:
    return text.strip().strip("'\"")
