"""A measured split-KV table for the paged decode attention arms: per device, dtype and arm, the split count that
was fastest at each measured (rows = batch x KV heads, the block tables' capacity, head_dim). `python -m lab bench
splits --out FILE` writes one; `engine/data/attn_splits/*.json` holds the committed ones.

The arms consult it (`chosen`) only inside `active(True)`, which the kernel table enters for a call whose
snapshot has VT_ATTN_SPLIT_TABLE on (engine/kernels/attention.py); elsewhere `chosen` is None and the arms keep
their occupancy rule (`paged_attn_tiled.num_splits`, `paged_attn_onepass.num_splits`). Another split count sums
the splits in another order, so the table is a setting behind the flip protocol, OFF by default.

The lookup (`Table.lookup`): the points of the same head_dim; none, or rows or capacity outside the box those
points span, and the rule decides (a table never extrapolates). Inside, the point nearest on a log scale
((ln rows/r)^2 + (ln cap/c)^2; a tie goes to the smaller rows, then the smaller capacity) gives its split count,
cut to the tiles the capacity holds (64 tokens each) and to MAX_SPLITS. Everything it reads is host-side shape
(the capacity, never the context lengths), so a captured CUDA graph keeps the choice it was captured with.

File format (schema 1):

    {"schema": 1, "kind": "attn-split-table",
     "tables": [{"device": "NVIDIA H200", "dtype": "bfloat16", "arm": "tiled",
                 "points": [{"rows": 8, "context": 1024, "head_dim": 128, "splits": 16, ...}, ...]}]}

Fields past these (the rule's split, both times, the command) are kept for the reader of the file and ignored
here."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch

SCHEMA = 1
KIND = "attn-split-table"
ARMS = ("tiled", "onepass")  # the tiled arms' Shape.splits() and the one-pass arm's
DTYPES = ("bfloat16", "float16")
MAX_SPLITS = 64  # kMaxSplits (paged_attn_tiled.cuh): the partial buffers' bound
TILE = 64  # tokens per K/V tile: more splits than tiles leave splits empty
DEFAULT_DIR = Path(__file__).resolve().parents[1] / "data" / "attn_splits"

_ON: ContextVar[bool] = ContextVar("split_table_on", default=False)
_SOURCE: ContextVar[Path | None] = ContextVar("split_table_source", default=None)
# (arm, splits) -> lookups that chose a table's split count (Python calls; a replayed graph is not counted again)
HITS: Counter[tuple[str, int]] = Counter()


class SplitTableError(ValueError):
    """A table file that is not a valid split table; the message names the file and the field."""


@dataclass(frozen=True)
class Point:
    rows: int  # batch x KV heads
    context: int  # the block tables' capacity in tokens
    head_dim: int
    splits: int
    won: bool = True  # False: the measured count did not beat the rule's there (the file's `rule` equals `splits`)


@dataclass(frozen=True)
class Table:
    device: str  # torch.cuda.get_device_name
    dtype: str  # "bfloat16" or "float16"
    arm: str  # one of ARMS
    points: tuple[Point, ...]
    memo: dict[tuple[int, int, int], int | None] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def lookup(self, rows: int, context: int, head_dim: int) -> int | None:
        """The nearest measured point's split count (see the module's docstring), or None outside the grid or where
        the nearest point's measurement kept the rule's count (the rule then decides at this shape's own capacity).
        Memoised per shape: a launch asks it up to three times (predicates and the launch)."""
        key = (rows, context, head_dim)
        if key not in self.memo:
            self.memo[key] = self._lookup(rows, context, head_dim)
        return self.memo[key]

    def _lookup(self, rows: int, context: int, head_dim: int) -> int | None:
        same = [p for p in self.points if p.head_dim == head_dim]
        if not same or rows < 1 or context < 1:
            return None
        if not min(p.rows for p in same) <= rows <= max(p.rows for p in same):
            return None
        # a capacity is its blocks' tokens, just past the length it was sized for: a tile past the edge is in
        if not min(p.context for p in same) <= context <= max(p.context for p in same) + TILE:
            return None

        def distance(p: Point) -> tuple[float, int, int]:
            return (math.log(rows / p.rows) ** 2 + math.log(context / p.context) ** 2, p.rows, p.context)

        nearest = min(same, key=distance)
        if not nearest.won:
            return None
        return max(1, min(nearest.splits, MAX_SPLITS, -(-context // TILE)))


def parse(data: Any, source: str) -> dict[tuple[str, str, str], Table]:
    """The tables of one file's JSON by (device, dtype, arm); a `SplitTableError` naming `source` and the bad field otherwise."""

    def bad(where: str, what: str) -> SplitTableError:
        return SplitTableError(f"{source}: {where}: {what}")

    if not isinstance(data, dict):
        raise bad("top level", f"expected an object, got {type(data).__name__}")
    if data.get("schema") != SCHEMA or data.get("kind") != KIND:
        raise bad("schema/kind", f"expected {SCHEMA} / {KIND!r}, got {data.get('schema')!r} / {data.get('kind')!r}")
    tables = data.get("tables")
    if not isinstance(tables, list):
        raise bad("tables", "expected a list")
    out: dict[tuple[str, str, str], Table] = {}
    for i, entry in enumerate(tables):
        at = f"tables[{i}]"
        if not isinstance(entry, dict):
            raise bad(at, "expected an object")
        device, dtype, arm = entry.get("device"), entry.get("dtype"), entry.get("arm")
        if not isinstance(device, str) or not device:
            raise bad(f"{at}.device", f"expected a device name, got {device!r}")
        if dtype not in DTYPES:
            raise bad(f"{at}.dtype", f"expected one of {', '.join(DTYPES)}, got {dtype!r}")
        if arm not in ARMS:
            raise bad(f"{at}.arm", f"expected one of {', '.join(ARMS)}, got {arm!r}")
        points = entry.get("points")
        if not isinstance(points, list) or not points:
            raise bad(f"{at}.points", "expected a non-empty list")
        parsed = [_point(p, f"{at}.points[{j}]", bad) for j, p in enumerate(points)]
        keys = [(p.rows, p.context, p.head_dim) for p in parsed]
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise bad(f"{at}.points", f"(rows, context, head_dim) measured twice: {twice[0]}")
        key = (device, str(dtype), str(arm))
        if key in out:
            raise bad(at, f"a second table for {device} {dtype} {arm}")
        out[key] = Table(device, str(dtype), str(arm), tuple(parsed))
    return out


def _point(p: Any, at: str, bad: Any) -> Point:
    if not isinstance(p, dict):
        raise bad(at, "expected an object")
    values = {}
    for name, high in (("rows", None), ("context", None), ("head_dim", None), ("splits", MAX_SPLITS)):
        v = p.get(name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1 or (high is not None and v > high):
            limit = f"1..{high}" if high is not None else "at least 1"
            raise bad(f"{at}.{name}", f"expected an int {limit}, got {v!r}")
        values[name] = v
    rule = p.get("rule")
    if rule is not None and (not isinstance(rule, int) or isinstance(rule, bool) or rule < 1):
        raise bad(f"{at}.rule", f"expected an int at least 1, got {rule!r}")
    return Point(**values, won=rule is None or rule != values["splits"])


def load(path: Path) -> dict[tuple[str, str, str], Table]:
    """Every table in `path`: one JSON file, or each `*.json` of a folder (a table in two files is an error naming
    both). A folder or file that is not there holds none. Read once per path and process (`clear_cache()` after a
    file changes)."""
    return dict(_tables(Path(path).resolve()))


@cache
def _tables(path: Path) -> Mapping[tuple[str, str, str], Table]:
    files = sorted(path.glob("*.json")) if path.is_dir() else [path] if path.exists() else []
    found: dict[tuple[str, str, str], tuple[Table, Path]] = {}
    for f in files:
        try:
            data = json.loads(f.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SplitTableError(f"{f}: not a readable JSON split table ({exc})") from None
        for key, table in parse(data, str(f)).items():
            if key in found:
                raise SplitTableError(f"{f}: the table for {' '.join(key)} is also in {found[key][1]}")
            found[key] = (table, f)
    return MappingProxyType({key: table for key, (table, _) in found.items()})


def clear_cache() -> None:
    """Forget the tables read so far (after a table file changed in this process)."""
    _tables.cache_clear()


@contextmanager
def active(on: bool, source: Path | None = None) -> Iterator[None]:
    """Within it the arms consult the tables (when `on`) of `source` (default: `use`'s, else DEFAULT_DIR)."""
    on_token = _ON.set(on)
    source_token = _SOURCE.set(Path(source).resolve()) if source is not None else None
    try:
        yield
    finally:
        if source_token is not None:
            _SOURCE.reset(source_token)
        _ON.reset(on_token)


@contextmanager
def use(source: Path) -> Iterator[None]:
    """Within it the tables come from `source` (a file or a folder) instead of DEFAULT_DIR: a test's or a
    benchmark's own table; whether they are consulted is still `active`'s."""
    token = _SOURCE.set(Path(source).resolve())
    try:
        yield
    finally:
        _SOURCE.reset(token)


def is_active() -> bool:
    return _ON.get()


def source() -> Path:
    return _SOURCE.get() or DEFAULT_DIR


@cache
def device_name(index: int) -> str:
    """The name a table is keyed by: the driver's name for the device (asked once per process)."""
    return torch.cuda.get_device_name(index)


def chosen(arm: str, rows: int, context: int, head_dim: int, dtype: torch.dtype, device_index: int) -> int | None:
    """The table's split count for this launch, or None (the arm's rule decides): not `active`, no table for this
    device, dtype and arm, or a shape outside its grid. A malformed table file raises `SplitTableError`."""
    if not _ON.get():
        return None
    key = (device_name(device_index), str(dtype).removeprefix("torch."), arm)
    table = _tables(source()).get(key)  # the source is resolved when set: no file-system call per launch
    return None if table is None else table.lookup(rows, context, head_dim)


def pick(arm: str, rows: int, context: int, head_dim: int, dtype: torch.dtype, device_index: int, rule: int) -> int:
    """The count an arm launches: the table's (`chosen`) where it holds one, else `rule`; a table's count that is
    not the rule's is counted in HITS (what the flip protocol's "did it run" reads: a table repeating the rule
    changed nothing)."""
    measured = chosen(arm, rows, context, head_dim, dtype, device_index)
    if measured is None or measured == rule:
        return rule
    HITS[(arm, measured)] += 1
    return measured
