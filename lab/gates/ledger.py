"""Write a gate's evidence record to `.agents/ledger/<date>-<slug>.json`."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path
from typing import Any


def repo_root(start: Path | None = None) -> Path | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"],
            cwd=start or Path.cwd(),
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return Path(out.stdout.strip()) if out.returncode == 0 else None


def head_sha(root: Path | None) -> str | None:
    """HEAD's sha, with `-dirty` appended when tracked files differ from it: a record made from an
    edited tree (or a copy whose git metadata is older than its files) never names a clean commit."""
    if root is None:
        return None
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10, check=False
        )
        if out.returncode != 0:
            return None
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    dirty = status.returncode != 0 or bool(status.stdout.strip())
    return out.stdout.strip() + ("-dirty" if dirty else "")


def write_record(
    ledger_dir: Path,
    slug: str,
    rows: list[str],
    command: str,
    device: str,
    summary: str,
    results: Any,
    sha: str | None,
    today: dt.date | None = None,
    kind: str = "gate",
) -> Path:
    """One JSON file per record; an existing name for the same day gets a numeric suffix, never overwritten."""
    date = (today or dt.datetime.now(dt.UTC).date()).isoformat()
    record = {
        "schema": 1,
        "date": date,
        "kind": kind,
        "rows": rows,
        "command": command,
        "sha": sha,
        "device": device,
        "summary": summary,
        "results": results,
    }
    ledger_dir.mkdir(parents=True, exist_ok=True)
    path = ledger_dir / f"{date}-{slug}.json"
    n = 2
    while path.exists():
        path = ledger_dir / f"{date}-{slug}-{n}.json"
        n += 1
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path
