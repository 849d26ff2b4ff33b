"""Write a gate's or a benchmark's evidence record to `.agents/ledger/<date>-<slug>.json`, schema 2.

A record proves where its numbers came from: the full commit and whether the tree was clean (a dirty tree only
by the caller's explicit `allow_dirty`, and then with its diff's hash and paths), every resolved `VT_*` flag,
device, driver and library versions, the exact command, and the figures with units. The record stays under
`SIZE_CAP` bytes (`rowgate check agent-record`, AR009): where it would not, the per-case arrays of `results` go
to a side file outside the repository (`details_dir`), largest first, and the record names it by sha256; the
summary, figures and per-arm tables stay.
The toolkit's `checkers.ledger_schema.LedgerRecord2` is the schema (the lab does not import the toolkit; its
tests validate what this module writes against that model).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import platform
import subprocess
import sys
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from engine.flags import FlagSnapshot
from lab.gates.ledger_details import SIZE_CAP, default_dir, render, split_results

SCHEMA = 2
MANIFEST = ".tree-manifest.json"  # beside a copy of the tree: its commit and blob ids (see manifest())
LIBRARIES = ("torch", "transformers", "safetensors", "flashinfer-python", "numpy")


class DirtyTreeError(RuntimeError):
    """A record from a tree that differs from its commit, without the caller's explicit switch."""


class RecordTooBigError(ValueError):
    """A record over SIZE_CAP bytes even with every per-case array moved to its side file."""


def repo_root(start: Path | None = None) -> Path | None:
    out = _git(start or Path.cwd(), "rev-parse", "--show-toplevel")
    return Path(out.strip()) if out is not None else None


def head_sha(root: Path | None) -> str | None:
    """HEAD's sha, with `-dirty` appended when tracked files differ from it (for messages; records store
    `commit` and `clean` apart)."""
    prov = provenance(root, allow_dirty=True) if root is not None else None
    if prov is None:
        return None
    return prov["commit"] + ("" if prov["clean"] else "-dirty")


def provenance(root: Path | None, allow_dirty: bool = False) -> dict[str, Any] | None:
    """`commit`, `clean` and, for a dirty tree, `dirty_allowed` and `diff` (sha256 of `git diff HEAD --binary`
    and the changed paths). A copy of a tree without its git metadata (a device machine's) proves its commit by
    the manifest `manifest()` wrote beside it. None where neither is there; a dirty tree without `allow_dirty`
    raises."""
    if root is None:
        return None
    commit = _git(root, "rev-parse", "HEAD")
    status = _git(root, "status", "--porcelain", "--untracked-files=no", "-z")
    if commit is None or status is None:
        return _from_manifest(root, allow_dirty)
    paths = sorted({entry[3:] for entry in status.split("\0") if len(entry) > 3})
    if paths and (root / MANIFEST).is_file():  # a copy whose git metadata is older than its files (a device's):
        copied = _from_manifest(root, allow_dirty=True)  # the manifest carried with it proves what the files are
        if copied is not None and copied["clean"]:
            return copied
    diff = _git(root, "diff", "HEAD", "--binary", "--no-ext-diff", raw=True) if paths else b""
    return _judged(commit.strip(), paths, diff if isinstance(diff, bytes) else b"", allow_dirty)


def _judged(commit: str, paths: list[str], diff: bytes, allow_dirty: bool) -> dict[str, Any]:
    if not paths:
        return {"commit": commit, "clean": True}
    if not allow_dirty:
        raise DirtyTreeError(
            f"the tree differs from {commit[:12]} in {len(paths)} files ({', '.join(paths[:3])}"
            f"{', ...' if len(paths) > 3 else ''}): commit first, or pass --allow-dirty to record it as dirty"
        )
    digest = hashlib.sha256(diff).hexdigest()
    return {"commit": commit, "clean": False, "dirty_allowed": True, "diff": {"sha256": digest, "paths": paths}}


def manifest(root: Path) -> dict[str, Any]:
    """HEAD and the blob id of every file it tracks, to carry with a copy of the tree (MANIFEST, untracked):
    the copy then proves which commit it is, file by file, without git. Written from a clean tree only."""
    commit = _git(root, "rev-parse", "HEAD")
    listing = _git(root, "ls-tree", "-r", "-z", "HEAD")
    if commit is None or listing is None:
        raise DirtyTreeError(f"{root} is not a git checkout")
    _judged(commit.strip(), sorted(_dirty_paths(root)), b"", allow_dirty=False)  # raises on a dirty tree
    blobs = {}
    for entry in listing.split("\0"):
        if entry:
            meta, path = entry.split("\t", 1)
            mode, kind, sha = meta.split()
            if kind == "blob":
                blobs[path] = [mode, sha]
    return {"commit": commit.strip(), "blobs": blobs}


def _dirty_paths(root: Path) -> list[str]:
    status = _git(root, "status", "--porcelain", "--untracked-files=no", "-z") or ""
    return [entry[3:] for entry in status.split("\0") if len(entry) > 3]


def _from_manifest(root: Path, allow_dirty: bool) -> dict[str, Any] | None:
    """A copy's provenance from its manifest: each tracked file hashed as git hashes a blob and compared."""
    path = root / MANIFEST
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    changed, h = [], hashlib.sha256()
    for rel, (mode, sha) in sorted(data["blobs"].items()):
        f = root / rel
        try:
            body = os.readlink(f).encode() if mode == "120000" else f.read_bytes()
        except OSError:
            body = None  # deleted in the copy
        if body is None or hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest() != sha:
            changed.append(rel)
            h.update(rel.encode() + b"\0" + (body or b""))
    return _judged(data["commit"], changed, h.digest(), allow_dirty)


def device_info(device: str) -> dict[str, str | None]:
    """The device as the record stores it: on this machine's GPU its name, driver and the CUDA runtime torch was
    built with; `cpu`; or a name as the caller gives it (a run on another machine, read from its logs)."""
    dev = str(device)
    if "cpu" in dev.lower():
        return {"name": "cpu", "driver": None, "cuda": None}
    if torch.cuda.is_available():
        local = torch.cuda.get_device_name(torch.device(dev) if dev.startswith("cuda") else None)
        if dev.startswith("cuda") or dev.startswith(local):
            smi = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
            driver = smi.splitlines()[0].strip() if smi else None
            return {"name": local, "driver": driver, "cuda": torch.version.cuda}
    return {"name": dev, "driver": None, "cuda": None}


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for lib in LIBRARIES:
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            continue
    return out


def figure(name: str, value: float, unit: str) -> dict[str, Any]:
    return {"name": name, "value": float(value), "unit": unit}


def write_record(
    ledger_dir: Path,
    slug: str,
    rows: list[str],
    command: str,
    device: str,
    summary: str,
    results: Any,
    today: dt.date | None = None,
    kind: str = "gate",
    *,
    figures: Iterable[Mapping[str, Any]] = (),
    paths: Iterable[str] = (),
    selftest: tuple[int, int] | None = None,
    flags: FlagSnapshot | None = None,
    allow_dirty: bool = False,
    root: Path | None = None,
    at: Path | None = None,
    details_dir: Path | None = None,
) -> Path:
    """One JSON file per record; an existing name for the same day gets a numeric suffix, never overwritten.
    `device` is the torch device the run used (`cuda`, `cuda:1`, `cpu`); `flags` the snapshot it ran with
    (default: the environment's, read now); `selftest` (seeded, caught) for a gate's comparator; `at` an exact
    file name instead of `<date>-<slug>.json`; `details_dir` where per-case arrays go when the record would be
    over SIZE_CAP (default: `details/` beside a record written outside the checkout, else a temporary folder:
    never the repository's ledger)."""
    root = root or repo_root(Path(__file__).resolve().parent)  # the checkout whose code ran
    prov = provenance(root, allow_dirty)
    if prov is None:
        raise DirtyTreeError(
            f"not in a git checkout and no {MANIFEST}: a record must name the commit it measured (in the checkout, "
            f"`python -m lab.gates.ledger manifest` writes the manifest to carry with a copy of the tree)"
        )
    date = (today or dt.datetime.now(dt.UTC).date()).isoformat()
    snapshot = flags or FlagSnapshot.from_env()
    record: dict[str, Any] = {
        "schema": SCHEMA,
        "date": date,
        "kind": kind,
        "rows": rows,
        "command": command,
        **prov,
        "flags": dict(snapshot.values),
        "device": device_info(device),
        "versions": versions(),
        "summary": summary,
        "figures": [dict(f) for f in figures],
        "paths": sorted(set(paths)),
    }
    if selftest is not None:
        record["comparator_selftest"] = {"seeded": selftest[0], "caught": selftest[1]}
    ledger_dir.mkdir(parents=True, exist_ok=True)
    path = at or free_path(ledger_dir, f"{date}-{slug}")
    folder = details_dir or default_dir(path.parent, root)
    side = folder / f"{path.stem}.details.json"
    kept, moved = split_results(record, results, {"path": str(side), "sha256": "0" * 64, "bytes": 10**12})
    body = (json.dumps(moved, indent=1) + "\n").encode()
    if moved:  # per-case arrays go to a side file outside the repository; the record keeps the rest
        record["details"] = {"path": str(side), "sha256": hashlib.sha256(body).hexdigest(), "bytes": len(body)}
    record["results"] = kept
    text = render(record)
    if len(text.encode()) > SIZE_CAP:
        raise RecordTooBigError(
            f"{path.name}: {len(text.encode())} bytes with its per-case arrays moved out (cap {SIZE_CAP}): "
            "shorten the summary, figures or paths"
        )
    if moved:
        folder.mkdir(parents=True, exist_ok=True)
        side.write_bytes(body)
    path.write_text(text)
    return path


def free_path(ledger_dir: Path, stem: str) -> Path:
    """`<stem>.json` in the ledger folder, or where that is taken the first free `<stem>-N.json` (N from 2)."""
    path, n = ledger_dir / f"{stem}.json", 2
    while path.exists():
        path = ledger_dir / f"{stem}-{n}.json"
        n += 1
    return path


def _git(cwd: Path, *args: str, raw: bool = False) -> Any:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return out.stdout if raw else out.stdout.decode("utf-8", errors="replace")


def _run(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def main(argv: list[str] | None = None) -> int:
    """`python -m lab.gates.ledger manifest [ROOT]`: write ROOT/.tree-manifest.json from its clean checkout."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "manifest":
        print("usage: python -m lab.gates.ledger manifest [ROOT]", file=sys.stderr)
        return 2
    root = Path(args[1]) if len(args) > 1 else (repo_root() or Path.cwd())
    try:
        data = manifest(root)
    except DirtyTreeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    (root / MANIFEST).write_text(json.dumps(data) + "\n")
    print(f"{root / MANIFEST}: {data['commit'][:12]}, {len(data['blobs'])} files")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
