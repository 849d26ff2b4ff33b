"""agent-record: each rule has a seeded violation that fails with exactly its message, and a clean twin."""
from __future__ import annotations

from pathlib import Path

from checkers.checks import agent_record
from checkers.config import load_config
from checkers.context import Context
from tests.conftest import GitRepo, row_yaml


def _run(repo: GitRepo):
    ctx = Context(root=repo.path, config=load_config(repo.path))
    return agent_record.run(ctx, None)


def test_clean_repository_passes_with_derived_counts(rowgate_repo: GitRepo):
    result = _run(rowgate_repo)
    assert (result.status.value, result.summary, result.examined) == ("pass", "OK: GOV=1 ENGINE=0", 2)


def test_ar001_record_invalid(rowgate_repo: GitRepo):
    rowgate_repo.write({".agents/rows/GOV-X.yaml": row_yaml("GOV-X", state="WIP")})
    [f] = _run(rowgate_repo).findings
    assert (f.rule, f.path, f.line) == ("AR001", ".agents/rows/GOV-X.yaml", 4)
    assert f.message.startswith("state: Input should be 'INVENTORIED', 'SPIKE'")


def test_ar002_row_unknown_area(rowgate_repo: GitRepo):
    rowgate_repo.write({".agents/rows/GOV-X.yaml": row_yaml("GOV-X", area="KERNEL")})
    [f] = _run(rowgate_repo).findings
    assert (f.rule, f.path, f.line, f.message) == (
        "AR002", ".agents/rows/GOV-X.yaml", 2, "area 'KERNEL' is not one of ['GOV', 'ENGINE']")


def test_the_repository_own_records_pass():
    root = Path(__file__).resolve().parents[2]
    result = agent_record.run(Context(root=root, config=load_config(root)), None)
    assert result.status.value == "pass", result.findings
