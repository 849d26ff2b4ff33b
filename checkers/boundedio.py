"""Every read of a file a branch can change, bounded before it is read and confined to the repository: the
size comes from fstat of the opened file (never from reading it), at most cap+1 bytes are read, a symlink
that leads out of the repository is refused and never followed, and anything but a regular file (a FIFO, a
device such as /dev/zero, a directory named like a record) is refused without reading. Opened with
O_NONBLOCK, so a FIFO cannot block the open either. The refusal is one line (Unreadable) that the caller
turns into a finding or a note."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .paths import escape
from .results import CheckError

MiB = 1 << 20
# Caps by what is read (docs/RELIABILITY.md lists them): records and config are small hand-written files;
# a scanned source or a doc table may be large, but not tens of megabytes.
RECORD_CAP = 1 * MiB  # rows, claims, ledger entries, specs, issue records, config, pyproject.toml
SOURCE_CAP = 8 * MiB  # a source file scanned by env-doc or gemv-invocation, a doc table, an allowlist
BUILD_CAP = 256 * MiB  # a build artefact (a cubin or fatbin, compile_commands.json) named by the user
LOCK_CAP = 4096  # the records lock holds one line


class Unreadable(CheckError):
    """A file refused before (or instead of) reading it; str() is one line naming it and why, `why` the
    reason alone; `special` when it is not a regular file (callers may skip it with a note)."""

    def __init__(self, shown: str, why: str, hint: str | None = None, special: bool = False):
        super().__init__(f"{shown} {why}", hint=hint)
        self.why = why
        self.special = special


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_bytes(path: Path, cap: int, root: Path | None = None, display: str | None = None) -> bytes:
    """At most `cap` bytes of the regular file `path`; Unreadable when it is larger, not a regular file, or
    (with `root`) resolves outside `root`. FileNotFoundError passes through (callers treat absence their
    own way)."""
    shown = escape(display or str(path))
    target = Path(os.path.realpath(path))
    if root is not None:
        base = _real_root(str(root))
        if target != base and base not in target.parents:
            raise Unreadable(
                shown,
                f"is a symlink that leads out of the repository (to {escape(str(target))}); not read",
                hint="replace the link by the file itself, or remove it",
            )
    try:
        st = os.lstat(target)
    except NotADirectoryError:
        raise FileNotFoundError(2, "No such file or directory", str(path)) from None
    if not stat.S_ISREG(st.st_mode):
        raise _special(shown, st.st_mode)
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise Unreadable(shown, f"cannot be read: {(exc.strerror or str(exc)).lower()}") from None
    try:
        st = os.fstat(fd)  # the file actually opened: it may have been swapped since the lstat
        if not stat.S_ISREG(st.st_mode):
            raise _special(shown, st.st_mode)
        if st.st_size > cap:
            raise _too_big(shown, st.st_size, cap)
        chunks, left = [], cap + 1
        while left > 0:
            data = os.read(fd, min(left, 1 << 20))
            if not data:
                break
            chunks.append(data)
            left -= len(data)
    finally:
        os.close(fd)
    raw = b"".join(chunks)
    if len(raw) > cap:  # it grew after the fstat
        raise _too_big(shown, len(raw), cap)
    return raw


_roots: dict[str, Path] = {}


def _real_root(root: str) -> Path:
    """The repository root with its symlinks resolved, once per process (a preflight reads about 1,500
    files under one root). The file's own path is still resolved on every read: only a root that is itself
    re-pointed while rowgate runs reads differently, and then its files fall outside the remembered place
    and are refused."""
    if root not in _roots:
        _roots[root] = Path(os.path.realpath(root))
    return _roots[root]


def read_text(path: Path, cap: int, root: Path | None = None, display: str | None = None) -> str:
    """read_bytes() decoded as UTF-8; invalid UTF-8 is Unreadable, naming the byte offset."""
    raw = read_bytes(path, cap, root, display)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Unreadable(
            escape(display or str(path)), f"is not UTF-8 text (byte {exc.start}: {exc.reason})", hint="save it as UTF-8"
        ) from None


def _too_big(shown: str, size: int, cap: int) -> Unreadable:
    return Unreadable(
        shown, f"is {size:,} bytes (limit {cap:,}); not read", hint="split it, or remove what does not belong"
    )


def _special(shown: str, mode: int) -> Unreadable:
    return Unreadable(shown, f"is {_kind(mode)}, not a file; not read", hint="remove it or rename it", special=True)
