"""Paths named by records and config stay inside the repository: no absolute path, no `..` that climbs
out, no symlink that leads out, no control character. Checks read such files only through confine();
the config's path fields are checked for the first three when it loads (repo_relative)."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from .results import CheckError

CONTROL = frozenset(chr(c) for c in range(32)) | {"\x7f"}


class OutsideRepo(CheckError, ValueError):
    """A record or config path that does not name a place inside the repository; str() says why. A check
    that meets one reports `error` (exit 3); a ValueError, so a pydantic validator can raise it too."""


def confine(root: Path, rel: str, field: str | None = None) -> Path:
    """`root / rel` when it lies inside `root` after normalising and resolving symlinks; else OutsideRepo.
    `field` names the config key that holds `rel` ("env_doc.doc"), for the message and its fix."""
    try:
        norm = repo_relative(rel)
        base = root.resolve()
        target = (base / norm).resolve()
        if target != base and base not in target.parents:
            raise OutsideRepo(f"{rel} leads out of the repository through a symlink (to {escape(str(target))})")
    except OutsideRepo as exc:
        if field is None:
            raise
        raise OutsideRepo(
            f"config {field}: {exc}", hint=f"set {field} to a path inside the repository, relative to its root"
        ) from None
    return target


def repo_relative(rel: str) -> str:
    """`rel` normalised, when it is a relative path that stays inside the repository as written (no
    control character, not absolute, no `..` out); else OutsideRepo. Symlinks are confine()'s part."""
    if not rel or any(ch in CONTROL for ch in rel):
        raise OutsideRepo(f"{escape(rel)!s} is empty or holds control characters")
    if rel.startswith("/") or Path(rel).is_absolute() or (len(rel) > 1 and rel[1] == ":"):
        raise OutsideRepo(f"{rel} is an absolute path (write it relative to the repository root)")
    norm = posixpath.normpath(rel)
    if norm == ".." or norm.startswith("../"):
        raise OutsideRepo(f"{rel} climbs out of the repository")
    return norm


def checked_relative(rel: str) -> str:
    """The config's validator for a path field: `rel` unchanged when repo_relative() accepts it (pydantic
    reports the ValueError with the file, line and field)."""
    repo_relative(rel)
    return rel


# What escape() writes as an escape: C0 controls and DEL, C1 controls (U+009B is a terminal's CSI), the
# bidirectional controls that reorder how a line displays (Trojan Source), lone surrogates (an undecodable
# byte of a file name, kept by surrogateescape: no UTF-8 output and no XML can hold one) and the two
# non-characters XML 1.0 refuses.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]")


def _escaped(ch: str) -> str:
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # the byte that surrogateescape kept
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape(text: str, keep: str = "") -> str:
    """`text` with each control character (but those in `keep`), C1 control, bidirectional control, lone
    surrogate and XML-forbidden non-character written as `\\xNN` or `\\uNNNN` (an undecodable byte as
    `\\xNN` of that byte), so a file name or a trailer value cannot break a line, forge one, reorder
    what a reader sees, reach the terminal as an escape sequence, or make XML invalid."""
    if not _UNSAFE.search(text):
        return text
    return _UNSAFE.sub(lambda m: m.group() if m.group() in keep else _escaped(m.group()), text)
