"""What a check derived from a file's bytes, remembered under the git directory by a hash of those bytes, so
an unchanged file is not parsed again (ruamel.yaml's round trip of a record, an ast walk of a source).

An entry is keyed by the sha256 of everything its value depends on (the file's bytes, and whatever options
the caller passes in), and the whole cache by a stamp: the rowgate version, the Python version, and what the
caller names (the source of the code that derives the values, the parsing library's version). A key that
does not match is a miss, never a guess. Each entry carries a seal, a hash of the stamp, its key and its
value: an entry whose value was altered (a half-written file, a hand edit) fails the seal and is a miss,
recomputed from the file. The seal is no secret: whoever can write the git directory can also install a hook
there, so the cache trusts that directory as git does, never the work tree a branch brings.

A run keeps the entries it used (and the ones it added), at most `max_entries`; the file is rewritten
atomically, only when that set changed. A cache that cannot be read or written is only a slower run.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from . import __version__

_VALIDATORS = ("pydantic", "ruamel.yaml")  # the libraries records are validated with: an upgrade may change a verdict

FORMAT = 1  # bump when the file's layout changes
CACHE_DIR = "rowgate/content-cache"  # under the git directory: per work tree, never committed
MAX_FILE_BYTES = 16 << 20  # a cache file larger than this is not read (and is rewritten smaller)


class ContentCache:
    """One check's entries (`name`), in `git_dir`/rowgate/content-cache/`name`.json; no git directory, no
    cache (every `get` misses and `save` writes nothing)."""

    def __init__(self, git_dir: Path | None, name: str, stamp: Iterable[str], max_entries: int = 4096):
        self.path = git_dir / CACHE_DIR / f"{name}.json" if git_dir is not None else None
        self.max_entries = max_entries
        parts = [f"rowgate {__version__} content cache {FORMAT}", sys.version, *stamp]
        self.stamp = hashlib.sha256("\0".join(parts).encode("utf-8", "surrogateescape")).hexdigest()
        self.hits = 0
        self.misses = 0
        self._old: dict[str, Any] = self._read() if self.path is not None else {}
        self._used: dict[str, list[Any]] = {}
        self._added = False

    @staticmethod
    def key(*parts: bytes | str) -> str:
        """The sha256 of `parts`, each length-prefixed so that no two different lists of parts collide."""
        h = hashlib.sha256()
        for part in parts:
            raw = part.encode("utf-8", "surrogateescape") if isinstance(part, str) else part
            h.update(b"%d:" % len(raw))
            h.update(raw)
        return h.hexdigest()

    def get(self, key: str) -> Any | None:
        """The value stored under `key`, or None (a miss: no entry, or one whose seal does not hold)."""
        entry = self._old.get(key)
        if isinstance(entry, list) and len(entry) == 2 and entry[0] == self._seal(key, entry[1]):
            self._used[key] = entry
            self.hits += 1
            return entry[1]
        self.misses += 1
        return None

    def put(self, key: str, value: Any) -> None:
        """Remember `value` (JSON data: it is read back as JSON) under `key`."""
        self._used[key] = [self._seal(key, value), value]
        self._added = True

    def save(self) -> None:
        """Write the entries this run used or added, when they differ from the file's."""
        if self.path is None or (not self._added and self._used.keys() == self._old.keys()):
            return
        entries = dict(list(self._used.items())[-self.max_entries :])
        text = json.dumps({"format": FORMAT, "stamp": self.stamp, "entries": entries}, separators=(",", ":"))
        try:
            from .atomicio import write_atomic

            write_atomic(self.path, text)
        except OSError:
            pass  # a read-only git directory: the next run derives again

    def _seal(self, key: str, value: Any) -> str:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return self.key(self.stamp, key, text)[:32]

    def _read(self) -> dict[str, Any]:
        assert self.path is not None
        try:
            with open(self.path, "rb") as f:
                if os.fstat(f.fileno()).st_size > MAX_FILE_BYTES:
                    return {}
                data = json.loads(f.read())
        except (OSError, ValueError, RecursionError):
            return {}
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("stamp") != self.stamp:
            return {}
        entries = data.get("entries")
        return entries if isinstance(entries, dict) else {}


def source_stamp(*modules: str) -> list[str]:
    """The source of checkers modules (paths relative to the package, e.g. "yamlio.py"), for a stamp: a change
    to the code that derives the values derives them again."""
    here = Path(__file__).parent
    return [f"{name}\0{(here / name).read_bytes().decode('latin-1')}" for name in modules]


def validator_stamps() -> list[str]:
    """Each validating library's entry file by path, size and modification time (an upgrade rewrites it),
    found without importing the library."""
    stamps = []
    for name in _VALIDATORS:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            st = os.stat(spec.origin)
            stamps.append(f"{name} {spec.origin} {st.st_size} {st.st_mtime_ns}")
    return stamps
