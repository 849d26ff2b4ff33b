"""A legacy record from a dirty tree says what history shows of that tree (`dirty`), consistent with its sha and
derived from git by scripts/ledger-dirty.py (a hand-edited or stale note is caught)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from checkers.recordmodels import LedgerEntry
from tests.conftest import ROOT, GitRepo

SCRIPT = ROOT / "scripts" / "ledger-dirty.py"

BASE, ADDED = "a" * 40, "b" * 40
NOTE = {
    "range": f"{BASE}..{ADDED}",
    "code_paths": ["engine/x.py"],
    "other_paths": 2,
    "diff_sha256": "0" * 64,
    "commits": ["bbbbbbb the work"],
    "note": "diff not kept",
}


def entry(sha: str | None, dirty: dict | None) -> dict:
    rec = {"schema": 1, "date": "2026-12-01", "kind": "gate", "rows": ["R"], "command": "c", "summary": "s"}
    return {**rec, "sha": sha, **({"dirty": dirty} if dirty is not None else {})}


def test_a_dirty_sha_with_its_range_validates() -> None:
    assert LedgerEntry.model_validate(entry(BASE + "-dirty", NOTE)).dirty.code_paths == ["engine/x.py"]


@pytest.mark.parametrize(
    ("sha", "dirty", "message"),
    [
        (BASE, NOTE, "whose sha ends in -dirty"),
        (None, NOTE, "whose sha ends in -dirty"),
        ("c" * 40 + "-dirty", NOTE, "starts at the measured commit cccccccccccc"),
        (BASE + "-dirty", {**NOTE, "range": BASE}, "range"),
    ],
)
def test_a_dirty_note_that_does_not_fit_its_sha_is_refused(sha: str | None, dirty: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        LedgerEntry.model_validate(entry(sha, dirty))


def test_every_dirty_note_in_the_ledger_starts_at_its_records_commit() -> None:
    ledger = Path(__file__).resolve().parents[2] / ".agents" / "ledger"
    noted = [json.loads(p.read_text()) for p in sorted(ledger.glob("*.json"))]
    noted = [d for d in noted if "dirty" in d]
    assert noted, "no record carries a dirty note"
    for d in noted:
        LedgerEntry.model_validate(d)


def run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(SCRIPT), "--root", str(root), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def test_the_note_is_derived_from_git_and_a_stale_one_is_caught(git_repo: GitRepo) -> None:
    measured = git_repo.commit("Kernel", {"engine/k.py": "x = 1\n", "docs/a.md": "a\n"})
    rec = entry(measured + "-dirty", {**NOTE, "range": f"{measured}..{'b' * 40}"})
    git_repo.commit(
        "The kernel's work in progress and its record",
        {"engine/k.py": "x = 2\n", "docs/a.md": "b\n", "README.md": "r\n", ".agents/ledger/r.json": json.dumps(rec)},
    )
    added = git_repo.git("rev-parse", "HEAD").strip()
    check = run(git_repo.path, "--check")
    assert check.returncode == 1 and "r.json: dirty is not what git derives" in check.stdout
    assert run(git_repo.path).returncode == 0
    dirty = json.loads((git_repo.path / ".agents/ledger/r.json").read_text())["dirty"]
    diff = subprocess.run(
        ["git", "diff", "--binary", measured, added, "--", "engine/k.py"], cwd=git_repo.path, capture_output=True
    ).stdout
    assert dirty["range"] == f"{measured}..{added}" and dirty["code_paths"] == ["engine/k.py"]
    assert dirty["other_paths"] == 3  # docs/a.md, README.md and the record itself
    assert dirty["diff_sha256"] == hashlib.sha256(diff).hexdigest()
    assert [c.split(" ", 1)[1] for c in dirty["commits"]] == ["The kernel's work in progress and its record"]
    LedgerEntry.model_validate(json.loads((git_repo.path / ".agents/ledger/r.json").read_text()))
    assert run(git_repo.path, "--check").returncode == 0


def test_every_dirty_note_in_the_ledger_is_what_git_derives() -> None:
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True, text=True)
    if shallow.stdout.strip() == "true":
        pytest.skip("a shallow clone: the records' ranges are not in its history")
    out = run(ROOT, "--check")
    assert out.returncode == 0, out.stdout + out.stderr
