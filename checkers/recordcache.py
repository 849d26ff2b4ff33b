"""A YAML record (a row, a claim, an issue's front matter) parsed once per content: its plain data and the
lines of its top-level keys, kept in a ContentCache, so an unchanged record is validated again without
ruamel.yaml's round trip (two thirds of the records' load).

Only a record that parsed and validated is kept, and a hit is validated again by its model, so a record
that no longer fits a changed model fails exactly as it would without the cache (its problems, with their
lines, come from a fresh parse). The data is kept as JSON with dates tagged; a record holding anything JSON
would not give back as it was (a timestamp, a key that looks like a tag) is never kept.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .contentcache import ContentCache, source_stamp, validator_stamps
from .yamlio import MAX_YAML_BYTES, RecordError, validate

M = TypeVar("M", bound=BaseModel)
_DATE = "\0date"  # the one tag: {"\0date": "2026-12-05"} is a date
MAX_ENTRIES = 16384  # records with an entry; beyond, the least recently used are dropped


class CachedDoc(dict[str, Any]):
    """A record's top-level data from the cache, answering `lc.key(key)` as ruamel's map does (the 0-based
    line of a top-level key; KeyError for a key the record lacks), so findings point at the same lines."""

    def __init__(self, data: dict[str, Any], lines: dict[str, int]):
        super().__init__(data)
        self.lc = _KeyLines(lines)


class _KeyLines:
    def __init__(self, lines: dict[str, int]):
        self._lines = lines

    def key(self, key: str) -> tuple[int, int]:
        return (self._lines[key], 0)


class ParsedCache:
    """The records' parse cache of one load (`with ParsedCache.of(root) as cache:` saves it at the end)."""

    def __init__(self, cache: ContentCache):
        self.cache = cache

    @classmethod
    def of(cls, root: Path) -> ParsedCache:
        """The records' cache of the work tree at `root`."""
        from .gitio import git_dir_of

        return cls.at(git_dir_of(root), "records")

    @classmethod
    def at(cls, git_dir: Path | None, name: str) -> ParsedCache:
        stamp = [*source_stamp("yamlio.py", "recordcache.py"), *validator_stamps()]
        return cls(ContentCache(git_dir, name, stamp, MAX_ENTRIES))

    def __enter__(self) -> ParsedCache:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.cache.save()

    def load_model(self, model: type[M], path: Path, display: str, root: Path | None = None) -> tuple[M, Any]:
        """As yamlio.load_model (the same bounded read, the same errors), from the cache when it has the bytes."""
        from .boundedio import Unreadable, read_bytes
        from .yamlio import parse_yaml

        try:
            raw = read_bytes(path, MAX_YAML_BYTES, root, display)
        except FileNotFoundError:
            raise RecordError(display, [(None, "", "file not found")]) from None
        except Unreadable as exc:
            raise RecordError(display, [(None, "", exc.why)]) from None
        return self._parsed(model, ContentCache.key("file", raw), display, lambda: parse_yaml(raw, display))

    def load_text_model(self, model: type[M], text: str, display: str) -> tuple[M, Any]:
        """As yamlio.load_text then validate, from the cache when it has the text."""
        from .yamlio import load_text

        key = ContentCache.key("text", text.encode("utf-8", "surrogateescape"))
        return self._parsed(model, key, display, lambda: load_text(text, display))

    def hit(self, key: str) -> tuple[dict[str, Any], dict[str, int]] | None:
        """The plain data and the top-level key lines of the document kept under `key`, if any."""
        return _decoded(self.cache.get(key))

    def keep(self, key: str, doc: Any) -> None:
        """Keep a round-trip document that validated under `key` (unless JSON cannot give it back)."""
        entry = _entry(doc)
        if entry is not None:
            self.cache.put(key, entry)

    def _parsed(self, model: type[M], key: str, display: str, parse: Callable[[], Any]) -> tuple[M, Any]:
        hit = self.hit(key)
        if hit is not None:
            data, lines = hit
            try:
                return model.model_validate(data), CachedDoc(data, lines)
            except ValidationError:
                pass  # the model changed since: the fresh parse below reports the problems with their lines
        doc = parse()
        obj = validate(model, doc, display)
        self.keep(key, doc)
        return obj, doc


class _Uncacheable(Exception):
    pass


def _entry(doc: Any) -> dict[str, Any] | None:
    """The cache's form of a round-trip document: its data (JSON, dates tagged) and its keys' lines."""
    from ruamel.yaml.comments import CommentedMap

    from .yamlio import to_plain

    if not isinstance(doc, CommentedMap) or not all(isinstance(k, str) for k in doc):
        return None
    try:
        data = _encode(to_plain(doc))
        lines = {k: int(doc.lc.key(k)[0]) for k in doc}
    except (_Uncacheable, KeyError, TypeError, IndexError):
        return None
    return {"data": data, "lines": lines}


def _encode(node: Any) -> Any:
    if node is None or type(node) in (bool, int, float, str):
        return node
    if isinstance(node, bool):
        raise _Uncacheable  # a bool subclass (an anchored YAML bool): not worth a tag
    if isinstance(node, dt.datetime):
        raise _Uncacheable  # ruamel's timestamps carry their own time-zone bookkeeping: not kept
    if isinstance(node, dt.date):
        return {_DATE: node.isoformat()}
    if isinstance(node, str):
        return str(node)  # a block or quoted scalar: the same text
    if isinstance(node, int):
        return int(node)  # a hex, octal or underscored int: the same number
    if isinstance(node, float):
        return float(node)
    if isinstance(node, dict):
        if any(not isinstance(k, str) or k.startswith("\0") for k in node):
            raise _Uncacheable
        return {k: _encode(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_encode(v) for v in node]
    raise _Uncacheable


def _decoded(entry: Any) -> tuple[dict[str, Any], dict[str, int]] | None:
    """An entry's data and lines, or None where its shape is not one _entry writes."""
    if (
        not isinstance(entry, dict)
        or not isinstance(entry.get("data"), dict)
        or not isinstance(entry.get("lines"), dict)
    ):
        return None
    lines = entry["lines"]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in lines.values()):
        return None
    try:
        data = _decode(entry["data"])
    except (_Uncacheable, ValueError, TypeError):
        return None
    return (data, lines) if isinstance(data, dict) else None


def _decode(node: Any) -> Any:
    if isinstance(node, dict):
        if _DATE in node:
            if len(node) != 1 or not isinstance(node[_DATE], str):
                raise _Uncacheable
            return dt.date.fromisoformat(node[_DATE])
        if any(k.startswith("\0") for k in node):
            raise _Uncacheable
        return {k: _decode(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_decode(v) for v in node]
    return node
