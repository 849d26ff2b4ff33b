"""A record's side file (lab/gates/ledger_details.py): which arrays leave `results` so the record fits, and
putting them back only from the file the record names."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from lab.gates.ledger_details import SIZE_CAP, join_details, render, split_results

CASES = [{"name": f"attn/warp/case{i}", "max_abs": 0.001, "verdict": "pass"} for i in range(200)]
RECORD = {"schema": 2, "summary": "200/200 cases within tolerance"}
STUB = {"path": "/out/x.details.json", "sha256": "0" * 64, "bytes": 10**12}


def _written(tmp_path: Path, kept: object, moved: dict[str, object]) -> dict[str, object]:
    """The record as write_record would leave it, with its side file at tmp_path/side.json."""
    body = (json.dumps(moved, indent=1) + "\n").encode()
    (tmp_path / "side.json").write_bytes(body)
    details = {"path": str(tmp_path / "side.json"), "sha256": hashlib.sha256(body).hexdigest(), "bytes": len(body)}
    return {**RECORD, "details": details, "results": kept}


def test_a_record_that_fits_moves_nothing():
    assert split_results(RECORD, {"cases": CASES[:3]}, STUB) == ({"cases": CASES[:3]}, {})


def test_the_largest_arrays_leave_first_and_the_rest_stays(tmp_path: Path):
    results = {"verdict": "PASS", "few": [1, 2], "details": {"counts": {"exact": 4694}, "not_exact": CASES}}
    kept, moved = split_results(RECORD, results, STUB)
    assert kept == {"verdict": "PASS", "few": [1, 2], "details": {"counts": {"exact": 4694}}}
    assert moved == {"results.details.not_exact": CASES}
    assert len(render({**RECORD, "details": STUB, "results": kept}).encode()) <= SIZE_CAP
    assert join_details(_written(tmp_path, kept, moved)) == results


def test_results_that_are_no_mapping_leave_whole(tmp_path: Path):
    kept, moved = split_results(RECORD, CASES, STUB)
    assert (kept, moved) == (None, {"results": CASES})
    assert join_details(_written(tmp_path, kept, moved)) == CASES


def test_a_side_file_that_is_not_the_one_named_is_refused(tmp_path: Path):
    record = _written(tmp_path, {}, {"results.cases": CASES})
    (tmp_path / "other.json").write_text("{}\n")
    with pytest.raises(ValueError, match="other.json is not the side file this record names"):
        join_details(record, tmp_path / "other.json")
    assert join_details({**RECORD, "results": {"a": 1}}) == {"a": 1}  # no side file: results as they are
