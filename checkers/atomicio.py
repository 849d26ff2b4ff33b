"""Record writes as git writes its index: a file is replaced by a complete temporary twin (same directory,
fsync, rename), a new record is created exclusively, and every read-modify-write of `.agents/` holds one
lock file, `.agents/rowgate.lock`, created with O_EXCL and naming its holder. A multi-file change is a
Transaction: on any error every file it touched gets its old bytes (or its absence) back."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from .results import CheckError

LOCK_NAME = "rowgate.lock"
DEFAULT_LOCK_TIMEOUT_S = 10.0
_POLL_S = 0.02
# A lock older than this is stale whoever holds it: a holder keeps it only for a write (milliseconds), and
# a holder on another host cannot be asked whether it still runs.
STALE_AFTER_S = 300.0
# A temporary file a killed writer left is removed once its pid is gone and it is this old (or, from
# another host, after STALE_AFTER_S).
TEMP_GRACE_S = 10.0


class LockTimeout(CheckError):
    """The records lock stayed held past the timeout; the message names the holder."""


def write_atomic(path: Path, data: str | bytes) -> None:
    """Replace `path` with `data`: a reader (or a crash at any point) sees the old file or the new one,
    never a part. Raises OSError (ENOSPC, EROFS, EDQUOT, EFBIG, ...) with `path` unchanged."""
    tmp = _write_temp(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise
    _fsync_dir(path.parent)


def create_exclusive(path: Path, data: str | bytes) -> None:
    """Create `path` with `data`, atomically and only if it does not exist (FileExistsError otherwise):
    the complete temporary file is hard-linked into place, which fails when the name is taken."""
    tmp = _write_temp(path, data)
    try:
        os.link(tmp, path)
    finally:
        _unlink(tmp)
    _fsync_dir(path.parent)


def _write_temp(path: Path, data: str | bytes) -> Path:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        mode = os.stat(path).st_mode & 0o777
    except FileNotFoundError:
        mode = 0o644
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except OSError as exc:
        os.close(fd)
        _unlink(tmp)
        if exc.filename is None:  # name the record, not the descriptor
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
    except BaseException:
        os.close(fd)
        _unlink(tmp)
        raise
    os.close(fd)
    return tmp


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not every file system lets a directory be opened for fsync
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


# --- the records lock ------------------------------------------------------------------------------


@contextlib.contextmanager
def records_lock(agents_dir: Path, timeout_s: float | None = None) -> Iterator[Path]:
    """Hold `<agents_dir>/rowgate.lock` for a write (callers load and validate before taking it and re-check
    under it). A second writer waits up to `timeout_s` (default $ROWGATE_LOCK_TIMEOUT or 10 s), then fails
    with LockTimeout naming the holder. A stale lock is broken (_stale_reason): its process is gone on this
    host, the host has rebooted since, its pid now belongs to another process, it is older than
    STALE_AFTER_S, or it is not a lock rowgate writes (empty, no pid, a FIFO, a directory). Temporary files
    that killed writers left are removed once the lock is held."""
    if timeout_s is None:
        timeout_s = _env_timeout()
    lock = agents_dir / LOCK_NAME
    agents_dir.mkdir(parents=True, exist_ok=True)
    me = os.getpid()
    token = (
        f"pid={me} host={socket.gethostname()} since={time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}"
        f" boot={_boot_id()} start={_start_ticks(me)} token={secrets.token_hex(8)}\n"
    )
    deadline = time.monotonic() + timeout_s
    # The holder's name is written before the lock appears (a complete file hard-linked into place),
    # so a lock is never seen empty, even when its writer was killed.
    tmp = _write_temp(lock, token)
    try:
        while True:
            try:
                os.link(tmp, lock)
                break
            except FileExistsError:
                holder = _read(lock)
            if holder is not None and _stale_reason(lock, holder):
                _break_stale(lock, holder)
            elif time.monotonic() >= deadline:
                raise LockTimeout(
                    f"{lock} is held by {_describe(holder)} (waited {timeout_s:g}s)",
                    hint=f"wait for it to finish; if that process is gone, remove {lock}",
                )
            else:
                time.sleep(_POLL_S)
    finally:
        _unlink(tmp)
    _sweep_temps(agents_dir)
    try:
        yield lock
    finally:
        if _read(lock) == token:  # never remove a lock that is no longer ours
            _unlink(lock)


def _env_timeout() -> float:
    try:
        return max(0.0, float(os.environ.get("ROWGATE_LOCK_TIMEOUT", DEFAULT_LOCK_TIMEOUT_S)))
    except ValueError:
        return DEFAULT_LOCK_TIMEOUT_S


NOT_A_LOCK = "\0not a lock file\0"  # what _read() gives for a FIFO, a directory or a huge file


def _read(path: Path) -> str | None:
    """The lock's text, bounded and never blocking (a FIFO as the lock is not opened for reading)."""
    from .boundedio import LOCK_CAP, Unreadable, read_bytes

    try:
        return read_bytes(path, LOCK_CAP).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return None
    except Unreadable:
        return NOT_A_LOCK


def _boot_id() -> str:
    """This boot's id (Linux); a lock naming another boot of this host was left before a restart."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read(64).strip() or "-"
    except OSError:
        return "-"


def _start_ticks(pid: int) -> str:
    """When process `pid` started (clock ticks since boot, Linux): a pid reused by a later process has
    another start time."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read(4096)
        return stat[stat.rindex(b")") + 2 :].split()[19].decode()
    except (OSError, ValueError, IndexError):
        return "-"


def _fields(holder: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in holder.split() if "=" in part)


def _describe(holder: str | None) -> str:
    if not holder:
        return "a process that has not written its name yet"
    f = _fields(holder)
    return f"pid {f.get('pid', '?')} on {f.get('host', '?')} since {f.get('since', '?')}"


def _stale_reason(lock: Path, holder: str) -> str | None:
    """Why the lock holding `holder` is stale, or None while its holder may still run."""
    f = _fields(holder)
    if holder == NOT_A_LOCK or not f.get("pid", "").isdigit():
        return "not a lock rowgate writes"
    try:
        age = time.time() - os.lstat(lock).st_mtime
    except FileNotFoundError:
        return None  # released meanwhile: the next link attempt takes it
    if age > STALE_AFTER_S:
        return f"older than {STALE_AFTER_S:g}s"
    if f.get("host") != socket.gethostname():
        return None
    if f.get("boot", "-") not in ("-", _boot_id()):
        return "left before this host restarted"
    pid = int(f["pid"])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "its process is gone"
    except PermissionError:
        pass  # runs, as another user
    if f.get("start", "-") not in ("-", _start_ticks(pid)):
        return "its pid now belongs to another process"
    return None


def _is_stale(holder: str) -> bool:
    """Whether a lock holding `holder` (as if just written) is stale."""
    return _stale_reason(Path(os.devnull), holder) is not None


def _sweep_temps(agents_dir: Path) -> None:
    """Remove the temporary twins (`.NAME.PID.HEX.tmp`) and set-aside stale locks that killed writers left
    under `agents_dir`: their pid is gone and they are TEMP_GRACE_S old, or they are STALE_AFTER_S old.
    Called with the lock held, so no live writer of this repository is between its write and rename."""
    now = time.time()
    for path in [*agents_dir.glob(".*.tmp"), *agents_dir.glob("*/.*.tmp"), *agents_dir.glob("*/*/.*.tmp")]:
        parts = path.name.rsplit(".", 3)
        pid = parts[1] if len(parts) == 4 else ""
        try:
            age = now - os.lstat(path).st_mtime
        except FileNotFoundError:
            continue
        gone = pid.isdigit() and not _runs(int(pid))
        if (gone and age > TEMP_GRACE_S) or age > STALE_AFTER_S:
            _unlink(path)
    for path in agents_dir.glob(f"{LOCK_NAME}.stale.*"):
        with contextlib.suppress(OSError):
            if now - os.lstat(path).st_mtime > TEMP_GRACE_S:
                _unlink(path)


def _runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _break_stale(lock: Path, holder: str) -> None:
    """Move the stale lock aside and drop it only if it is still the stale one (another process may have
    broken it and taken the lock in between: then its lock is put back)."""
    aside = lock.with_name(f"{lock.name}.stale.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        os.rename(lock, aside)
    except FileNotFoundError:
        return
    if _read(aside) != holder:
        with contextlib.suppress(OSError):
            os.link(aside, lock)
    with contextlib.suppress(OSError):
        if os.path.isdir(aside) and not os.path.islink(aside):
            os.rmdir(aside)  # a directory named like the lock: removed when empty, else left aside
        else:
            _unlink(aside)


# --- multi-file transactions ----------------------------------------------------------------------


class Transaction:
    """Writes, creations and removals that all happen or none does: `rollback()` restores each touched
    file's old bytes (or its absence), newest first."""

    def __init__(self) -> None:
        self._undo: list[tuple[Path, bytes | None]] = []

    def write(self, path: Path, data: str | bytes) -> None:
        old = _read_bytes(path)
        write_atomic(path, data)  # a write that fails leaves the file as it was: nothing to undo
        self._undo.append((path, old))

    def create(self, path: Path, data: str | bytes) -> None:
        create_exclusive(path, data)  # FileExistsError before anything is remembered: nothing to undo
        self._undo.append((path, None))

    def remove(self, path: Path) -> None:
        old = _read_bytes(path)
        _unlink(path)
        self._undo.append((path, old))

    def rollback(self) -> None:
        """Undo newest first; an undo that fails does not stop the others (the first failure is raised)."""
        failed: OSError | None = None
        for path, old in reversed(self._undo):
            try:
                if old is None:
                    _unlink(path)
                else:
                    write_atomic(path, old)
            except OSError as exc:
                failed = failed or exc
        self._undo.clear()
        if failed is not None:
            raise failed


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


@contextlib.contextmanager
def records_transaction(agents_dir: Path, timeout_s: float | None = None) -> Iterator[Transaction]:
    """The records lock, and a Transaction that is rolled back when the block raises."""
    with records_lock(agents_dir, timeout_s):
        txn = Transaction()
        try:
            yield txn
        except BaseException:
            txn.rollback()
            raise


def describe_os_error(exc: OSError, path: Path | str) -> str:
    """One line for a failed record write: what and where ("no space left on device writing X")."""
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    if exc.errno == errno.EEXIST:
        reason = "it already exists"
    return f"could not write {path}: {reason.lower()}; nothing was changed"
