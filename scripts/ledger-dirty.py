#!/usr/bin/env python3
"""Say in a legacy ledger record what its dirty tree held, as far as git can tell (`dirty`).

    scripts/ledger-dirty.py [--check] [--root DIR] [RECORD.json ...]

A schema-1 record whose `sha` ends in `-dirty` ran on the measured commit plus edits that were never kept. What
git still knows bounds them: the edits were the work in progress that the first commit adding the record landed,
so the run's tree was the measured commit plus at most the changes of `<measured>..<first commit adding it>` to the
measured code (engine/, lab/, ci/, scripts/bench). Each record's `dirty` names that range, the code paths it
changes, the sha256 of that diff (`git diff --binary <range> -- <code paths>`: the most the edits can have been,
pinned), the commits in it that touch the code (the newest 6, subjects cut at 72 characters, the rest counted),
and how many other paths it changes.

Without RECORD arguments it takes every record of the evidence ledger that already has `dirty`. It writes the
derived fields back; `--check` writes nothing and exits 1 when a record's `dirty` is not what git derives.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

LEDGER = Path(".agents") / "ledger"
CODE = ("engine", "lab", "ci", "scripts/bench")
MAX_COMMITS = 6
NOTE = (
    "the run's uncommitted edits were not kept: it ran on the measured commit plus at most the range's changes to "
    "code_paths (diff_sha256; the commits listed), which the range's last commit holds; flags: those the command "
    "sets, the rest at the measured commit's defaults"
)


def derive(root: Path, record: Path, sha: str) -> dict[str, Any]:
    """The `dirty` git gives for a record measured at `sha` (without `-dirty`)."""

    def git(*args: str) -> bytes:
        return subprocess.run(("git", *args), cwd=root, check=True, capture_output=True).stdout

    rel = str(record.relative_to(root))
    added = git("log", "--diff-filter=A", "--format=%H", "--", rel).decode().split()
    if not added:
        raise SystemExit(f"{rel}: no commit adds it (commit the record first)")
    end = added[-1]  # the oldest: the commit that landed the run's work with its record
    rng = f"{sha}..{end}"
    code = git("diff", "--name-only", sha, end, "--", *CODE).decode().split()
    every = git("diff", "--name-only", sha, end).decode().split()
    diff = git("diff", "--binary", sha, end, "--", *code) if code else b""
    commits = [c[:72] for c in git("log", "--format=%h %s", rng, "--", *CODE).decode().splitlines()]
    if len(commits) > MAX_COMMITS:  # the newest first; the rest counted (records stay under the size cap)
        commits = [*commits[:MAX_COMMITS], f"(+{len(commits) - MAX_COMMITS} more: git log {rng} -- {' '.join(CODE)})"]
    return {
        "range": rng,
        "code_paths": code,
        "other_paths": len(set(every) - set(code)),
        "diff_sha256": hashlib.sha256(diff).hexdigest(),
        "commits": commits,
        "note": NOTE,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 where a record's dirty is stale")
    p.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent, help="the repository")
    p.add_argument("records", nargs="*", type=Path)
    args = p.parse_args(argv)
    root = args.root.resolve()
    paths = [r.resolve() for r in args.records] or sorted((root / LEDGER).glob("*.json"))
    stale = 0
    for path in paths:
        data = json.loads(path.read_text())
        sha = data.get("sha")
        if not isinstance(sha, str) or not sha.endswith("-dirty"):
            if args.records:
                print(f"{path.name}: its sha does not end in -dirty: nothing to say", file=sys.stderr)
            continue
        if not args.records and "dirty" not in data:
            continue
        dirty = derive(root, path, sha.removesuffix("-dirty"))
        if data.get("dirty") == dirty:
            continue
        stale += 1
        if args.check:
            print(f"{path.name}: dirty is not what git derives (run scripts/ledger-dirty.py {path.name})")
            continue
        data["dirty"] = dirty
        if "results" in data:  # results stay last, as the writers put them
            data["results"] = data.pop("results")
        path.write_text(json.dumps(data, indent=1) + "\n")  # as scripts/ledger-trim.py writes them
        print(f"{path.name}: {dirty['range'][:7]}..{dirty['range'][42:49]}, {len(dirty['code_paths'])} code paths")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
