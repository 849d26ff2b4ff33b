"""A legacy record from a dirty tree says what history shows of that tree (`dirty`), consistent with its sha."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from checkers.recordmodels import LedgerEntry

BASE, ADDED = "a" * 40, "b" * 40
NOTE = {"range": f"{BASE}..{ADDED}", "code_paths": ["engine/x.py"], "other_paths": 2, "note": "diff not kept"}


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
