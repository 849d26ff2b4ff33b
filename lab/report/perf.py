"""ENGINE-PERF's two tables from ledger records, each row naming the record it stands on.

    python -m lab report perf [--ledger DIR ...] [--context 1024] [--today YYYY-MM-DD]

(a) paged decode attention at the six peer shapes: the engine's default arm against FlashInfer with tensor cores,
FlashInfer, SDPA cuDNN and SDPA flash (peer time over engine time: above 1 the engine is faster); (b) the decode
step at batch 1, 8 and 32 against its weight-streaming floor (% of floor) and against transformers compiled and
graphed. Each row is taken from the newest record that holds both of its numbers (they come from one run, so the
ratio is a same-run ratio) and prints that record's name, short commit, tree state and age. A record that does
not prove its origin (a dirty tree, no flag snapshot, a schema-1 record without a commit) is used but marked on
its row; a row no record holds says `no record`. Exit 0 when every row stands on a clean record with flags, 1
otherwise, 2 on a usage error. The figure names are lab/bench/figures.py's.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.bench.figures import ENGINE, PEER_SHAPES, attn_name, decode_name, from_results
from lab.gates.ledger_details import join_details

ATTN_PEERS = ("flashinfer-tc", "flashinfer", "sdpa-cudnn", "sdpa-flash")
BATCHES = (1, 8, 32)
# issue #40's targets: attention at or above FlashInfer-TC; the step at 40% (b1) and 60% (b32) of its floor
ATTN_TARGET = {"flashinfer-tc": 1.0}
FASTEST_PEER_TARGET = 0.9  # the shape's fastest peer (cuDNN at five of the six on the H200)
FLOOR_TARGET_PCT = {1: 40.0, 32: 60.0}
HF_PEER = "transformers-compiled"


@dataclass(frozen=True)
class Source:
    """One ledger record and what it proves about its origin."""

    name: str
    date: dt.date
    order: tuple[Any, ...]
    commit: str | None
    clean: bool | None
    flags: int
    device: str
    figures: dict[str, float] = field(hash=False)
    unavailable: dict[str, str] = field(default_factory=dict, hash=False)  # figure name -> why it did not run

    def marks(self) -> list[str]:
        out = []
        if self.commit is None:
            out.append("no commit")
        elif self.clean is not True:
            out.append("DIRTY")
        if not self.flags:
            out.append("no flags")
        return out

    def tree(self) -> str:
        return "clean" if self.clean is True and self.commit else "DIRTY" if self.clean is False else "unknown"


@dataclass(frozen=True)
class Row:
    label: str
    peer: str
    engine: float | None = None
    other: float | None = None
    source: Source | None = None
    note: str = ""  # why a missing row is missing, where a record said
    batch: int = 0  # the decode rows' batch

    def ratio(self) -> float | None:
        """The peer's number over the engine's, from one record; None for a missing row."""
        return None if self.engine is None or self.other is None else self.other / self.engine


def load(dirs: Iterable[Path]) -> tuple[list[Source], list[str]]:
    """Every record in the ledger folders (their top level; `details/` is read for a record that sent its results
    there) with the figures it holds; second, the files that could not be read, with why."""
    sources, skipped = [], []
    for d in dirs:
        for path in sorted(d.glob("*.json")):
            try:
                data = json.loads(path.read_text())
                if not isinstance(data, dict):
                    raise ValueError("not a JSON object")
                sources.append(_source(path, data))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                skipped.append(f"{path}: {type(exc).__name__}: {exc}")
    return sources, skipped


def _source(path: Path, data: dict[str, Any]) -> Source:
    figures: dict[str, float] = {}
    results = _results(data)
    for f in from_results(results):  # derived first; the record's own figures win
        figures[f["name"]] = float(f["value"])
    for f in data.get("figures") or []:
        figures[f["name"]] = float(f["value"])
    commit = data.get("commit") if data.get("schema") == 2 else None
    date = dt.date.fromisoformat(str(data["date"]))
    device = data.get("device")
    device_name = device.get("name", "?") if isinstance(device, dict) else str(device or "?")
    return Source(
        name=path.stem,
        date=date,
        order=(date, path.stat().st_mtime_ns, path.name),
        commit=commit if isinstance(commit, str) else None,
        clean=data.get("clean") if commit else None,
        flags=len(data.get("flags") or {}),
        device=device_name,
        figures=figures,
        unavailable=_unavailable(results),
    )


def _unavailable(results: Any) -> dict[str, str]:
    """A six-shape run's peers that could not run (FlashInfer not installed), by the figure they would have been."""
    out: dict[str, str] = {}
    if isinstance(results, dict) and isinstance(results.get("per_shape"), list):
        for entry in results["per_shape"]:
            for arm, why in (entry.get("unavailable") or {}).items():
                out[attn_name(entry["shape"], arm)] = str(why)
    return out


def _results(data: dict[str, Any]) -> Any:
    """The record's results with its side file's arrays put back where that file is still there (a device run's
    output folder); else what the record kept (its figures and per-shape tables stay in it)."""
    if data.get("details"):
        try:
            return join_details(data)
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return data.get("results")


def newest(sources: list[Source], *names: str) -> Source | None:
    """The newest record holding every one of `names`."""
    having = [s for s in sources if all(n in s.figures for n in names)]
    return max(having, key=lambda s: s.order) if having else None


def attn_rows(sources: list[Source]) -> list[Row]:
    rows = []
    for shape in PEER_SHAPES:
        label = f"b{shape['batch']} ctx{shape['ctx']} {shape['hq']}/{shape['hkv']} d{shape['d']}"
        for peer in ATTN_PEERS:
            eng, other = attn_name(shape, ENGINE), attn_name(shape, peer)
            src = newest(sources, eng, other)
            if src is None:
                tried = [s for s in sources if eng in s.figures and other in s.unavailable]
                last = max(tried, key=lambda s: s.order) if tried else None
                note = f"not run in {last.name}: {last.unavailable[other][:80]}" if last else ""
                rows.append(Row(label, peer, note=note))
                continue
            rows.append(Row(label, peer, src.figures[eng], src.figures[other], src))
    return rows


def decode_rows(sources: list[Source], context: int) -> list[Row]:
    rows = []
    for b in BATCHES:
        step = decode_name(b, context, "step")
        for peer, what in (("floor", "floor"), (HF_PEER, "hf_compiled")):
            other = decode_name(b, context, what)
            src = newest(sources, step, other)
            label = f"b{b} ctx{context}"
            if src is None:
                rows.append(Row(label, peer, batch=b))
            else:
                rows.append(Row(label, peer, src.figures[step], src.figures[other], src, batch=b))
    return rows


def render(sources: list[Source], skipped: list[str], context: int, today: dt.date) -> tuple[str, int]:
    """Both tables, the records they stand on and a verdict line; the exit status."""
    attn, dec = attn_rows(sources), decode_rows(sources, context)
    lines = [
        "(a) paged decode attention: the engine's default arm against each peer "
        "(eng/peer = peer time / engine time; above 1 the engine is faster)",
        _header("shape", "peer us", "eng us", "eng/peer"),
    ]
    for r in attn:
        lines.append(
            _line(r, f"{r.other or 0:.1f}", f"{r.engine or 0:.1f}", r.ratio(), "x", _attn_target(r, attn), today)
        )
    lines += [
        "",
        "(b) decode step against its weight-streaming floor (% of floor = floor / step) and transformers "
        "compiled + graphed (eng/peer = peer step / engine step)",
        _header("step", "peer ms", "eng ms", "eng/peer"),
    ]
    for r in dec:
        ratio, cells = r.ratio(), (f"{r.other or 0:.3f}", f"{r.engine or 0:.3f}")
        if r.peer == "floor":  # floor / step, as a percentage
            pct = None if ratio is None else 100.0 * ratio
            lines.append(_line(r, *cells, pct, "%", FLOOR_TARGET_PCT.get(r.batch), today))
        else:
            lines.append(_line(r, *cells, ratio, "x", None, today))
    rows = attn + dec
    missing = [r for r in rows if r.source is None]
    unproven = [r for r in rows if r.source is not None and r.source.marks()]
    used = sorted({r.source for r in rows if r.source is not None}, key=lambda s: s.order)
    lines += ["", "records used:"]
    for s in used:
        marks = ", ".join(s.marks()) or "clean, flags"
        lines.append(f"  {s.name}: {s.date} commit {(s.commit or '-')[:12]} on {s.device}; {marks}")
    if not used:
        lines.append("  none")
    for why in skipped:
        lines.append(f"  skipped {why}")
    verdict = (
        f"report perf: {len(rows)} rows, {len(rows) - len(missing)} from records; {len(missing)} without a record, "
        f"{len(unproven)} from records that do not prove their origin (dirty, no commit or no flags)"
    )
    ok = not missing and not unproven
    lines.append(("PASS: " if ok else "INCOMPLETE: ") + verdict)
    return "\n".join(lines), 0 if ok else 1


def _attn_target(r: Row, rows: list[Row]) -> float | None:
    """FlashInfer-TC's 1.0x; 0.9x for the shape's fastest peer (the stricter where both apply)."""
    target = ATTN_TARGET.get(r.peer)
    timed = [x.other for x in rows if x.label == r.label and x.other is not None]
    if r.other is not None and min(timed) == r.other:
        target = max(target or 0.0, FASTEST_PEER_TARGET)
    return target


def _header(key: str, peer: str, eng: str, ratio: str) -> str:
    return (
        f"{key:<22} {'peer':<22} {peer:>9} {eng:>9} {ratio:>8} {'target':>12}  "
        f"{'record':<44} {'commit':<8} {'tree':<7} {'age':>4}  marks"
    )


def _line(r: Row, other: str, eng: str, value: float | None, unit: str, target: float | None, today: dt.date) -> str:
    if r.source is None:
        return f"{r.label:<22} {r.peer:<22} no record" + (f" ({r.note})" if r.note else "")
    shown = f"{value:.2f}x" if unit == "x" else f"{value:.1f}%"
    goal = "-"
    if target is not None and value is not None:
        limit = f"{target:.2f}x" if unit == "x" else f"{target:.0f}%"
        goal = f"{'met' if value >= target else 'missed'} {limit}"
    s = r.source
    age = f"{(today - s.date).days}d"
    marks = ", ".join(s.marks())
    return (
        f"{r.label:<22} {r.peer:<22} {other:>9} {eng:>9} {shown:>8} {goal:>12}  "
        f"{s.name[:44]:<44} {(s.commit or '-')[:8]:<8} {s.tree():<7} {age:>4}  {marks}"
    ).rstrip()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m lab report perf", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--ledger",
        type=Path,
        action="append",
        metavar="DIR",
        help="a folder of ledger records (repeatable; default .agents/ledger)",
    )
    p.add_argument("--context", type=int, default=1024, help="the decode step's prompt length (default 1024)")
    p.add_argument("--today", type=dt.date.fromisoformat, help="the date ages count to (default: today, UTC)")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write {passed, examined, summary} here (lab ci)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    dirs = args.ledger or [Path(".agents/ledger")]
    absent = [str(d) for d in dirs if not d.is_dir()]
    if absent:
        print(f"error: --ledger {', '.join(absent)}: not a folder", file=sys.stderr)
        return 2
    sources, skipped = load(dirs)
    text, status = render(sources, skipped, args.context, args.today or dt.datetime.now(dt.UTC).date())
    print(text)
    if args.json:
        verdict = text.splitlines()[-1]
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"passed": status == 0, "examined": len(sources), "summary": verdict}) + "\n")
    return status
