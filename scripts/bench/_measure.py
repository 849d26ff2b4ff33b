"""Interleaved timing of benchmark arms against a floor in one run, the ratio table, and the ledger record."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO, TypeVar

REPO_ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


class Progress:
    """Progress of a long loop on stderr, never in the result stream: one line per item with its time, the
    elapsed time and an ETA, the fat build's line (engine/cuda/build.py progress_line):
    `[3/12] rep 1, git log floor: 0.21s; 2s elapsed, ETA 6s`. The ETA assumes the rest take as long on
    average as the finished items did. With many short items a line is printed at most every `every_s`
    seconds (and for the last item)."""

    def __init__(self, total: int, label: str = "", every_s: float = 0.0, stream: TextIO | None = None):
        self.total, self.label, self.every_s = total, label, every_s
        self.stream = sys.stderr if stream is None else stream
        self.done = 0
        self.start = self.last = time.perf_counter()

    def step(self, what: str, seconds: float) -> None:
        self.done += 1
        now = time.perf_counter()
        if self.done < self.total and now - self.last < self.every_s:
            return
        self.last = now
        elapsed = now - self.start
        eta = f"ETA {elapsed / self.done * (self.total - self.done):.0f}s" if self.done < self.total else "all done"
        prefix = f"{self.label}: " if self.label else ""
        print(
            f"{prefix}[{self.done}/{self.total}] {what}: {seconds:.2f}s; {elapsed:.0f}s elapsed, {eta}",
            file=self.stream,
            flush=True,
        )


def phase(what: str, fn: Callable[[], T]) -> T:
    """Run one long step (building a repository, a single long run), saying on stderr what and how long."""
    print(f"{what} ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    out = fn()
    print(f"{what}: done in {time.perf_counter() - start:.1f}s", file=sys.stderr, flush=True)
    return out


def measure(arms: dict[str, Callable[[], object]], reps: int) -> dict[str, list[float]]:
    """Run every arm once per repetition, in turn (arms interleaved); repetition 0 warms caches and is dropped.
    Each run is a progress line on stderr."""
    times: dict[str, list[float]] = {name: [] for name in arms}
    progress = Progress((reps + 1) * len(arms), "measure")
    for rep in range(reps + 1):
        for name, fn in arms.items():
            start = time.perf_counter()
            fn()
            took = time.perf_counter() - start
            if rep:
                times[name].append(took)
            progress.step(f"rep {rep}{' (warm-up, dropped)' if not rep else ''}, {name}", took)
    return times


def table(
    title: str, times: dict[str, list[float]], floor: str, goal: float, references: tuple[str, ...] = ()
) -> tuple[str, list[dict]]:
    """The printed table (median, min-max band, ratio of medians to the floor, per-pair worst ratio);
    every arm but the floor and the `references` is held to the goal."""
    base = statistics.median(times[floor])
    rows, results = [title, f"{'arm':<48} {'median':>8} {'min':>8} {'max':>8} {'ratio':>7} {'worst pair':>10}"], []
    for name, ts in times.items():
        med = statistics.median(ts)
        worst = max(t / f for t, f in zip(ts, times[floor]))
        ratio = med / base
        mark = "" if name == floor or name in references else ("  ok" if ratio < goal else f"  over the {goal:g}x goal")
        rows.append(f"{name:<48} {med:>7.3f}s {min(ts):>7.3f}s {max(ts):>7.3f}s {ratio:>6.2f}x {worst:>9.2f}x{mark}")
        results.append(
            {
                "arm": name,
                "median_s": round(med, 4),
                "min_s": round(min(ts), 4),
                "max_s": round(max(ts), 4),
                "ratio": round(ratio, 3),
                "worst_pair_ratio": round(worst, 3),
            }
        )
    return "\n".join(rows), results


def write_ledger(
    path: Path,
    rows: list[str],
    command: str,
    summary: str,
    results: dict,
    figures: list[dict] | None = None,
    allow_dirty: bool = False,
    details_dir: Path | None = None,
) -> None:
    """A schema-2 record (checkers/ledger_schema.py), validated before it is written: this checkout's commit and
    whether it is clean (a dirty tree only with `allow_dirty`, its diff's hash and paths recorded). The checkers
    read no VT_* flag, so the flag snapshot is empty. A record over the size cap moves its largest arrays of
    `results` to a side file outside the repository (`details_dir`, default a temporary folder), named by sha256."""
    # the bench helpers load before the checkout is on sys.path
    from checkers.ledger_schema import SIZE_CAP, LedgerRecord2

    def git(*args: str) -> bytes:
        return subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, check=True).stdout

    commit = git("rev-parse", "HEAD").decode().strip()
    status = git("status", "--porcelain", "--untracked-files=no", "-z").decode()
    changed = sorted({e[3:] for e in status.split("\0") if len(e) > 3})
    if changed and not allow_dirty:
        raise SystemExit(f"bench: the tree differs from HEAD in {len(changed)} files: commit, or pass --allow-dirty")
    provenance: dict = {"commit": commit, "clean": not changed}
    if changed:
        digest = hashlib.sha256(git("diff", "HEAD", "--binary", "--no-ext-diff")).hexdigest()
        provenance.update(dirty_allowed=True, diff={"sha256": digest, "paths": changed})
    results = {**results, "load_average_1m": round(os.getloadavg()[0], 2)}  # a shared machine is noisy: say so
    record = {
        "schema": 2,
        "date": dt.date.today().isoformat(),
        "kind": "bench",
        "rows": rows,
        "command": command,
        **provenance,
        "flags": {},
        "device": {"name": f"cpu: {os.cpu_count()} cores", "driver": None, "cuda": None},
        "versions": {"python": platform.python_version(), "git": git("--version").decode().split()[-1]},
        "summary": summary,
        "figures": figures or [],
        "results": results,
    }
    side = (details_dir or Path(tempfile.gettempdir()) / "ledger-details") / f"{path.stem}.details.json"
    text, moved = json.dumps(record, indent=1) + "\n", {}
    arrays = sorted((k for k, v in results.items() if isinstance(v, list)), key=lambda k: -len(json.dumps(results[k])))
    for key in arrays if len(text.encode()) > SIZE_CAP else ():
        moved[f"results.{key}"] = record["results"].pop(key)
        body = (json.dumps(moved, indent=1) + "\n").encode()
        record["details"] = {"path": str(side), "sha256": hashlib.sha256(body).hexdigest(), "bytes": len(body)}
        record["results"] = record.pop("results")  # after `details`, as the lab writes it
        text = json.dumps(record, indent=1) + "\n"
        if len(text.encode()) <= SIZE_CAP:
            break
    if len(text.encode()) > SIZE_CAP:
        raise SystemExit(
            f"bench: {path.name} would be {len(text.encode())} bytes (cap {SIZE_CAP}): shorten its summary"
        )
    LedgerRecord2.model_validate(record)
    if moved:
        side.parent.mkdir(parents=True, exist_ok=True)
        side.write_bytes(body)
        print(f"wrote {side} (per-case arrays, outside the repository)", file=sys.stderr)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"wrote {path}", file=sys.stderr)


def cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    """`rowgate ARGS` as a user runs it: a fresh interpreter from this checkout."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run([sys.executable, "-m", "checkers", *args], cwd=cwd, env=env, capture_output=True)
