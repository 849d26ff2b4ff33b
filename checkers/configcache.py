"""The validated config, cached by content under the git directory, so a check can read it without pydantic.

Validating `.agents/config.yaml` imports pydantic and ruamel.yaml and builds every section's model: about
0.3 s, more than a commit-msg hook or a 10,000-commit range check spends on its own work. A check that names
the sections it reads (`CONFIG_SECTIONS` in its module) gets them from here, as plain attribute objects with
the names and values of the models, typed as the models they read as (`load_sections` returns a `Config` to
the type checker; a test holds every view equal to the validated model, field by field, all the way down). Only a config that validated is cached, and what is cached is
pydantic's own dump of it. Each config file has its own entry (a file under `rowgate/config-cache/` in the
git directory, named for the config), so runs that alternate `--config a.yaml` and `--config b.yaml` hit
both; the least recently validated entries beyond MAX_ENTRIES are dropped. An entry is keyed on the config
file's identity and bytes and the source of the schema and its loader, compared whole (exact, and cheaper
than importing hashlib), and on the installed pydantic and ruamel.yaml, so any edit to a config (that
config's entry only) or to the schema, or an upgrade of either library, validates again; a cache that
cannot be read or written is only a slower run.
"""

from __future__ import annotations

import json
import os
import re
import zlib
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

from . import __version__
from .configsource import ConfigSource, locate
from .contentcache import validator_stamps

if TYPE_CHECKING:
    from .config import Config

CACHE_DIR = "rowgate/config-cache"  # under the git directory: per work tree, never committed
LEGACY_CACHE = "rowgate/config-cache.json"  # the one entry of earlier versions, removed on the next write
MAX_ENTRIES = 16  # config files with an entry; a write beyond drops the least recently validated
_SCHEMA_SOURCES = ("config.py", "yamlio.py")  # the code that decides what a config means
FORMAT = 1  # bump when the cache file's layout changes


class Section(SimpleNamespace):
    """A validated config section: the same attribute names and values as its pydantic model."""


class ConfigView(Section):
    """The config sections one check declared; reading any other section is a bug in that check."""

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"config section {name!r} is not in the check's CONFIG_SECTIONS")


def load_sections(
    root: Path, git_dir: Path | None, sections: Iterable[str], source: ConfigSource | None = None
) -> Config:
    """The named top-level sections of the validated config (a ConfigView, read as the Config it mirrors);
    raises RecordError as `load_config` does."""
    source = locate(root) if source is None else source
    key = cache_key(f"{source.kind}\0{source.display}\0".encode("utf-8", "surrogateescape") + source.raw)
    cache = cache_file(git_dir, source) if git_dir is not None else None
    data = _read(cache, key) if cache is not None else None
    if data is None:
        # pydantic and ruamel.yaml: only when the cache misses
        from .config import parse_source

        data = parse_source(source).model_dump(mode="json")
        if cache is not None:
            _write(cache, key, data)
    return cast("Config", ConfigView(**{name: to_section(data[name]) for name in sections}))


def cache_file(git_dir: Path, source: ConfigSource) -> Path:
    """The entry of one config file: its name readable (the tail of the config's path) and made unique by
    a checksum of the config's kind and path. A collision is only a miss: the key inside is compared whole."""
    ident = f"{source.kind}\0{source.display}".encode("utf-8", "surrogateescape")
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", source.display)[-48:].strip("._-") or "config"
    return git_dir / CACHE_DIR / f"{stem}-{zlib.crc32(ident):08x}.json"


def cache_key(raw: bytes, schema: Iterable[Path] | None = None) -> str:
    """Everything the validation depends on, verbatim: the format, the version, the schema's source and the
    config's bytes (latin-1 maps every byte to one character, so nothing is lost)."""
    here = Path(__file__).parent
    paths = [here / name for name in _SCHEMA_SOURCES] if schema is None else list(schema)
    parts = [f"rowgate {__version__} config cache {FORMAT}", *validator_stamps()]
    parts += [f"{p.name}\0{p.read_bytes().decode('latin-1')}" for p in paths]
    return "\0".join(parts + [raw.decode("latin-1")])


def to_section(value: Any) -> Any:
    """JSON data as attributes: every object becomes a Section (declared sections hold no free-form maps)."""
    if isinstance(value, dict):
        return Section(**{k: to_section(v) for k, v in value.items()})
    if isinstance(value, list):
        return [to_section(v) for v in value]
    return value


def _read(path: Path, key: str) -> dict[str, Any] | None:
    try:
        entry = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("key") != key or not isinstance(entry.get("config"), dict):
        return None
    config: dict[str, Any] = entry["config"]
    return config


def _write(path: Path, key: str, data: dict[str, Any]) -> None:
    """Write through a temporary file and a rename, so a concurrent reader sees the old entry or the new.
    A repository that cannot take the file (read-only, odd permissions) keeps no cache: the next run
    validates again."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"key": key, "config": data}))
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        return
    _prune(path)


def _prune(written: Path) -> None:
    """Keep the MAX_ENTRIES most recently written entries (`written` always), and drop the single entry
    of earlier versions."""
    try:
        (written.parents[1] / Path(LEGACY_CACHE).name).unlink(missing_ok=True)
        entries = [(p.stat().st_mtime_ns, p) for p in written.parent.glob("*.json") if p != written]
    except OSError:
        return
    for _, old in sorted(entries, reverse=True)[MAX_ENTRIES - 1 :]:
        try:
            old.unlink(missing_ok=True)
        except OSError:
            pass
