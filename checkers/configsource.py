"""Which config file a repository's checks read, found without importing the schema or the cache: `--config`,
`$ROWGATE_CONFIG`, `.agents/config.yaml`, `[tool.rowgate]` in `pyproject.toml`, else none (the defaults).
Both the schema (checkers.config) and the cache (checkers.configcache) start from it."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from .results import RecordError

CONFIG_PATH = ".agents/config.yaml"  # checkers.config.CONFIG_PATH (a test holds them equal)
PYPROJECT = "pyproject.toml"
ENV_VAR = "ROWGATE_CONFIG"
_TOOL_TABLE = re.compile(rb"^[ \t]*\[[ \t]*tool\.rowgate[ \t]*[.\]]", re.MULTILINE)  # read without parsing TOML


class ConfigSource(NamedTuple):
    """Which config was read: a file and how it was chosen, or none (every check on its defaults)."""

    path: Path | None  # None: no config file, the defaults
    display: str  # repository-relative where it can be, for messages
    origin: str  # --config | $ROWGATE_CONFIG | found | none
    kind: str  # yaml | pyproject | none
    raw: bytes  # the bytes validated (and the cache key): the file, or b"" for the defaults

    def describe(self) -> str:
        if self.path is None:
            return (
                "none found (.agents/config.yaml, [tool.rowgate] in pyproject.toml): every check on its "
                "defaults; `rowgate init` writes one"
            )
        how = {"found": "found", "--config": "chosen by --config"}.get(self.origin, f"chosen by {self.origin}")
        section = " [tool.rowgate]" if self.kind == "pyproject" else ""
        return f"{self.display}{section} ({how})"


def locate(root: Path, flag: str | Path | None = None, env: Mapping[str, str] | None = None) -> ConfigSource:
    """The config to read, in this order: `--config PATH`, `$ROWGATE_CONFIG`, `.agents/config.yaml`, a
    `[tool.rowgate]` table in `pyproject.toml`; else none (the defaults). A chosen file must exist."""
    env = os.environ if env is None else env
    for given, origin in ((flag, "--config"), (env.get(ENV_VAR) or None, f"${ENV_VAR}")):
        if given:
            path = Path(given)
            path = path if path.is_absolute() else Path.cwd() / path
            display = _display(root, path)
            try:
                raw = _read(path, display, None)
            except OSError as exc:
                why = exc.strerror.lower() if exc.strerror else str(exc)
                raise RecordError(display, [(None, "", f"{why} (the config named by {origin})")]) from None
            kind = "pyproject" if path.name == "pyproject.toml" else "yaml"
            return ConfigSource(path, display, origin, kind, raw)
    path = root / CONFIG_PATH
    try:
        return ConfigSource(path, CONFIG_PATH, "found", "yaml", _read(path, CONFIG_PATH, root))
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise RecordError(CONFIG_PATH, [(None, "", str(exc.strerror or exc))]) from None
    pyproject = root / PYPROJECT
    try:
        raw = _read(pyproject, PYPROJECT, root)
    except (OSError, RecordError):
        raw = b""  # no readable pyproject.toml: no config there
    if _TOOL_TABLE.search(raw):
        return ConfigSource(pyproject, PYPROJECT, "found", "pyproject", raw)
    return ConfigSource(None, "(defaults)", "none", "none", b"")


def _read(path: Path, display: str, root: Path | None) -> bytes:
    """The config file's bytes, bounded (and, for one found in the repository, confined to it): a link to
    /dev/zero or a FIFO is a one-line config error, never a read without end."""
    from .boundedio import RECORD_CAP, Unreadable, read_bytes

    try:
        return read_bytes(path, RECORD_CAP, root, display)
    except Unreadable as exc:
        raise RecordError(display, [(None, "", exc.why)]) from None


def _display(root: Path, path: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)
