"""The checker benchmarks' ledger writer (scripts/bench/_measure.py write_ledger) keeps a record under the size
cap: its largest arrays go to a side file outside the repository, named in the record by sha256."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from checkers.ledger_schema import SIZE_CAP, LedgerRecord2
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts" / "bench"))
from _measure import write_ledger  # noqa: E402

RUNS = [{"rep": i, "seconds": 0.25, "note": "x" * 40} for i in range(200)]


def test_a_small_record_keeps_its_results(tmp_path: Path):
    path = tmp_path / "ledger" / "small.json"
    write_ledger(path, ["GOV-CORE"], "scripts/bench-checkers.py x", "s", {"median_s": 0.25}, allow_dirty=True)
    data = json.loads(path.read_text())
    assert "details" not in data and data["results"]["median_s"] == 0.25


def test_per_run_arrays_go_to_a_side_file(tmp_path: Path):
    path = tmp_path / "ledger" / "big.json"
    out = tmp_path / "out"
    results = {"median_s": 0.25, "runs": RUNS, "few": [1, 2]}
    write_ledger(path, ["GOV-CORE"], "scripts/bench-checkers.py x", "s", results, allow_dirty=True, details_dir=out)
    data = json.loads(path.read_text())
    LedgerRecord2.model_validate(data)
    assert path.stat().st_size <= SIZE_CAP
    assert set(data["results"]) == {"median_s", "few", "load_average_1m"}
    body = (out / "big.details.json").read_bytes()
    assert json.loads(body) == {"results.runs": RUNS}
    assert data["details"] == {
        "path": str(out / "big.details.json"),
        "sha256": hashlib.sha256(body).hexdigest(),
        "bytes": len(body),
    }


def test_a_record_that_cannot_fit_is_refused(tmp_path: Path):
    path = tmp_path / "ledger" / "long.json"
    with pytest.raises(SystemExit, match=r"would be \d+ bytes \(cap 8192\): shorten its summary"):
        write_ledger(path, ["GOV-CORE"], "x", "s" * 9000, {"runs": RUNS}, allow_dirty=True, details_dir=tmp_path)
    assert not path.exists()
