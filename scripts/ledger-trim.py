#!/usr/bin/env python3
"""Shrink ledger records over the size cap (agent-record AR009) by taking their per-case arrays out.

    scripts/ledger-trim.py [--dry-run] [--out DIR] [--cap BYTES] [RECORD.json ...]

Without RECORD arguments it takes every record under the evidence ledger folder that is over the cap
(`record.ledger_size_cap`). An array of objects (the cases of a numerics run, the rows of a sweep) is emptied,
innermost arrays first and the largest first, until the record fits; of each array it keeps the entries that
hold a number a document cites from the record (`[ledger: NAME]` in the evidence documents) and that the rest
of the record does not hold, so every citation still stands. The summary, figures and per-arm tables stay.

The record gains `trimmed`: the original's size, sha256 and git blob id, a commit whose tree holds it
(`git cat-file -p <blob>` gives it back), and per array the entries it had, the entries kept and, where the
entries name an arm and a verdict, the counts per arm. `--out DIR` (outside the repository) also writes the
dropped arrays to DIR/<name>.dropped.json. The original must be committed unchanged, so history holds it.

Exit 0 when every record it took now fits; 1 when one cannot fit without dropping what a document cites (it
is left as it was: list it in record.ledger_size_exempt with the reason).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from checkers.checks.evidence.citations import NUMBER, scan  # noqa: E402
from checkers.checks.evidence.ledger import Record  # noqa: E402
from checkers.config import load_config  # noqa: E402
from checkers.safe_regex import compile_pattern  # noqa: E402

BY = "scripts/ledger-trim.py"
Path_ = tuple[str | int, ...]  # keys and indexes from the record's top to an array


def render(data: dict[str, Any]) -> bytes:
    """A record as the writers write it."""
    return (json.dumps(data, indent=1) + "\n").encode()


def arrays(node: Any, at: Path_ = ()) -> list[Path_]:
    """Every array of objects under `node`, inner ones before the arrays that hold them."""
    out: list[Path_] = []
    if isinstance(node, dict):
        for k, v in node.items():
            out += arrays(v, (*at, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += arrays(v, (*at, i))
        if node and all(isinstance(v, dict) for v in node):
            out.append(at)
    return out


def pattern(at: Path_) -> str:
    """`results.runs[*].not_exact`: the arrays of one shape, trimmed and reported together."""
    return "".join("[*]" if isinstance(k, int) else (f".{k}" if i else str(k)) for i, k in enumerate(at))


def get(data: Any, at: Path_) -> Any:
    for k in at:
        data = data[k]
    return data


def holds(data: dict[str, Any], number: str) -> bool:
    return Record("x", "x", 0, data).holds(number)


def counts(entries: list[dict[str, Any]]) -> dict[str, dict[str, int]] | None:
    """Entries per arm and verdict (`verdict`, else `passed`), where the entries say them."""
    if not all("arm" in e and ("verdict" in e or "passed" in e) for e in entries):
        return None
    tally: dict[str, Counter[str]] = {}
    for e in entries:
        verdict = e["verdict"] if "verdict" in e else ("pass" if e["passed"] else "fail")
        tally.setdefault(str(e["arm"]), Counter())[str(verdict)] += 1
    return {arm: dict(sorted(c.items())) for arm, c in sorted(tally.items())}


def trim(
    data: dict[str, Any], cited: list[str], cap: int
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, list[Any]]]:
    """The record with per-case arrays emptied until it fits (keeping the entries citations need), what each
    trim dropped, and the dropped entries by pattern. Raises ValueError when it cannot fit."""
    data = copy.deepcopy(data)
    dropped: list[dict[str, Any]] = []
    removed: dict[str, list[Any]] = {}
    done: set[str] = set()
    while len(render(data)) > cap:
        groups: dict[str, list[Path_]] = {}
        for at in arrays(data.get("results")):
            groups.setdefault(pattern(("results", *at)), []).append(("results", *at))
        # inner arrays first (a trim of an outer one would take the inner ones with it), then the largest
        open_ = [(p, ats) for p, ats in groups.items() if p not in done]
        if not open_:
            raise ValueError(f"{len(render(data))} bytes with every per-case array trimmed")
        depth = max(len(ats[0]) for _, ats in open_)
        name, ats = max(
            ((p, a) for p, a in open_ if len(a[0]) == depth),
            key=lambda pa: sum(len(render_any(get(data, at))) for at in pa[1]),
        )
        done.add(name)
        entries = [e for at in ats for e in get(data, at)]
        originals = [list(get(data, at)) for at in ats]
        for at in ats:
            get(data, at).clear()
        kept_ids: set[int] = set()
        for number in cited:
            if holds(data, number):
                continue
            for at, original in zip(ats, originals, strict=True):
                hit = next((e for e in original if holds({"e": e}, number)), None)
                if hit is not None:
                    get(data, at).append(hit)
                    kept_ids.add(id(hit))
                    break
        for at, original in zip(ats, originals, strict=True):  # kept entries in their original order
            keep = [e for e in original if id(e) in kept_ids]
            get(data, at)[:] = keep
        dropped.append({"path": name, "entries": len(entries), "kept": len(kept_ids), "counts": counts(entries)})
        removed[name] = [e for e in entries if id(e) not in kept_ids]
    for d in dropped:
        if d["counts"] is None:
            del d["counts"]
    return data, dropped, removed


def render_any(node: Any) -> bytes:
    return json.dumps(node, indent=1).encode()


def cited_numbers(root: Path) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Per record name, the numbers the evidence documents print beside a marker citing it (the evidence check
    holds these), and the decimals printed in a paragraph, item or table row that names its file (`NAME.json`:
    the check does not hold these to the record, but a reader may look them up there)."""
    cfg = load_config(root).evidence
    marker = compile_pattern(cfg.marker)
    marked: dict[str, list[str]] = {}
    nearby: dict[str, list[str]] = {}
    for doc in cfg.documents:
        path = root / doc
        if not path.is_file():
            continue
        for block in scan(path.read_text(), marker, cfg.file_names, cfg.headline_sections, cfg.defaults_words):
            decimals = [n for n in NUMBER.findall(block.text) if "." in n]
            for c in block.citations:
                if c.marker and c.number is not None:
                    marked.setdefault(c.name, []).append(c.number)
                elif not c.marker:
                    nearby.setdefault(c.name, []).extend(decimals)
    return marked, nearby


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


def trim_file(
    root: Path, path: Path, cited: list[str], nearby: list[str], cap: int, out: Path | None, dry_run: bool
) -> str:
    rel = path.resolve().relative_to(root.resolve()).as_posix()
    raw = path.read_bytes()
    blob = git(root, "hash-object", "--", rel)
    commit = git(root, "rev-parse", "HEAD")
    try:
        committed = git(root, "rev-parse", f"HEAD:{rel}")
    except subprocess.CalledProcessError:
        committed = ""
    if committed != blob:
        raise ValueError("not committed as it is: commit it first, so history holds the original")
    data = json.loads(raw)
    if "trimmed" in data:
        raise ValueError("already trimmed once")
    note = ""
    try:
        small, dropped, removed = trim(data, cited + nearby, cap)
    except ValueError:  # the numbers near a file-name reference do not all fit: the marked ones must
        small, dropped, removed = trim(data, cited, cap)
        lost = sorted({n for n in nearby if holds(data, n) and not holds(small, n)})
        note = f"; numbers printed near its file name no longer in it: {', '.join(lost)}" if lost else ""
    missing = [n for n in cited if holds(data, n) and not holds(small, n)]
    assert not missing, f"a trim lost cited numbers {missing}"  # trim() keeps an entry for each
    info = {
        "bytes": len(raw),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "git_blob": blob,
        "commit": commit,
        "by": BY,
        "dropped": dropped,
    }
    result = {k: v for k, v in small.items() if k != "results"} | {"trimmed": info, "results": small.get("results")}
    text = render(result)
    if len(text) > cap:
        raise ValueError(f"{len(text)} bytes once `trimmed` is added")
    if not dry_run:
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            (out / f"{path.stem}.dropped.json").write_text(json.dumps(removed, indent=1) + "\n")
        path.write_bytes(text)
    what = ", ".join(f"{d['path']} {d['kept']}/{d['entries']}" for d in dropped)
    what = f"{what} kept" if what else "re-indented only"
    return f"{rel}: {len(raw)} -> {len(text)} bytes ({what}{note})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", nargs="*", type=Path)
    parser.add_argument("--cap", type=int, help="bytes (default: record.ledger_size_cap)")
    parser.add_argument("--out", type=Path, help="write the dropped entries here (outside the repository)")
    parser.add_argument("--dry-run", action="store_true", help="print what would change; write nothing")
    parser.add_argument("--root", type=Path, default=None, help="the repository (default: this checkout)")
    args = parser.parse_args(argv)
    root = (args.root or Path.cwd()).resolve()
    config = load_config(root)
    cap = args.cap or config.record.ledger_size_cap
    if args.out is not None and args.out.resolve().is_relative_to(root):
        parser.error(f"--out {args.out} is inside the repository; per-case arrays go outside it")
    ledger = root / config.evidence.ledger_dir
    paths = args.records or [p for p in sorted(ledger.glob("*.json")) if p.stat().st_size > cap]
    marked, nearby = cited_numbers(root)
    status = 0
    for path in paths:
        try:
            name = path.stem
            print(trim_file(root, path, marked.get(name, []), nearby.get(name, []), cap, args.out, args.dry_run))
        except ValueError as exc:
            print(f"{path}: left as it was: {exc}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    raise SystemExit(main())
