"""Paths named by records and config stay inside the repository: no absolute path, no `..` that climbs
out, no symlink that leads out, no control character. Checks read files only through confine()."""

from __future__ import annotations

import posixpath
from pathlib import Path

CONTROL = frozenset(chr(c) for c in range(32)) | {"\x7f"}


class OutsideRepo(ValueError):
    """A record or config path that does not name a place inside the repository; str() says why."""


def confine(root: Path, rel: str) -> Path:
    """`root / rel` when it lies inside `root` after normalising and resolving symlinks; else OutsideRepo."""
    if not rel or any(ch in CONTROL for ch in rel):
        raise OutsideRepo(f"{escape(rel)!s} is empty or holds control characters")
    if rel.startswith("/") or Path(rel).is_absolute() or (len(rel) > 1 and rel[1] == ":"):
        raise OutsideRepo(f"{rel} is an absolute path (write it relative to the repository root)")
    norm = posixpath.normpath(rel)
    if norm == ".." or norm.startswith("../"):
        raise OutsideRepo(f"{rel} climbs out of the repository")
    base = root.resolve()
    target = (base / norm).resolve()
    if target != base and base not in target.parents:
        raise OutsideRepo(f"{rel} leads out of the repository through a symlink (to {target})")
    return target


def escape(text: str, keep: str = "") -> str:
    """`text` with each control character (but those in `keep`) written as \\xNN, so a file name or a
    trailer value cannot break a line, forge one, or reach the terminal as an escape sequence."""
    if not any(ch in CONTROL and ch not in keep for ch in text):
        return text
    return "".join(f"\\x{ord(ch):02x}" if ch in CONTROL and ch not in keep else ch for ch in text)
