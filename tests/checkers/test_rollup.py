"""AR008: a hand-written per-state summary table agrees with the rows it sums (vllm.cpp's engine-matrix
lifecycle summary, on the excerpt of its tables)."""

from __future__ import annotations

from pathlib import Path

from tests.checkers.test_record_tables import _agent_record, _findings
from tests.checkers.vllmcpp_excerpt import ENGINE, excerpt_repo


def test_the_summary_of_the_excerpt_agrees(tmp_path: Path):
    assert _agent_record(excerpt_repo(tmp_path / "repo")).status.value == "pass"


def test_a_summary_that_drifts_from_the_rows_is_a_finding(tmp_path: Path):
    engine = ENGINE.replace(
        "| **Total** | **3** | **1** | **1** | **1** |", "| **Total** | **3** | **1** | **2** | **1** |"
    )
    result = _agent_record(excerpt_repo(tmp_path / "repo", **{".agents/engine-matrix.md": engine}))
    assert _findings(result) == [("AR008", ".agents/engine-matrix.md", 5, "summary active=2; actual 1")]


def test_a_summary_without_its_total_line_is_a_finding(tmp_path: Path):
    engine = ENGINE.replace("| **Total** | **3** | **1** | **1** | **1** |\n", "")
    result = _agent_record(excerpt_repo(tmp_path / "repo", **{".agents/engine-matrix.md": engine}))
    assert _findings(result) == [
        ("AR008", ".agents/engine-matrix.md", 3, "summary table has no well-formed Total line")
    ]


def test_imported_rows_count_for_the_table_they_came_from(tmp_path: Path):
    from checkers.cli import main
    from tests.checkers.test_records_import import _imported

    repo = excerpt_repo(tmp_path / "repo")
    assert main(["records", "import", "--repo", str(repo.path)]) == 0
    _imported(repo.path)
    assert _agent_record(repo).status.value == "pass"  # the rows are record files now, summed for their table
    assert main(["row", "set", "ENG-CHUNKED-PREFILL", "--state", "PARTIAL", "--repo", str(repo.path)]) == 0
    assert _findings(_agent_record(repo)) == [
        ("AR008", ".agents/engine-matrix.md", 5, "summary anchor backfill=1; actual 0")
    ]
