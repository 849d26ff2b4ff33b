"""live-rows: every rule has a seeded violation on a real repository, a clean twin, and honest skips."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from checkers.checks.records import live_rows
from checkers.config import load_config
from checkers.context import Context
from tests.conftest import MINIMAL_CONFIG, ROOT, GitRepo, row_yaml

SPEC = "# x\n\n## Goal\n\n## Acceptance\n\n## Issues\n"


def _run(repo: GitRepo, report: bool = False):
    ctx = Context(root=repo.path, config=load_config(repo.path), env={})
    return live_rows.run(ctx, argparse.Namespace(check=not report, report=report))


def _claim(row: str, branch: str = "row/GOV-X", since: str = "2026-11-29", cid: str = "c1") -> dict[str, str]:
    return {f".agents/claims/{cid}.yaml": f"id: {cid}\nrow: {row}\nbranch: {branch}\nowner: ada\nsince: {since}\n"}


def _active(repo: GitRepo, state: str = "ACTIVE", claim: str = "c1") -> None:
    repo.write({".agents/rows/GOV-X.yaml": row_yaml("GOV-X", state=state, claim=claim), ".agents/specs/GOV-X.md": SPEC})


@pytest.fixture
def cloned(rowgate_repo: GitRepo, tmp_path: Path) -> GitRepo:
    """A clone whose `origin` remote has refs, so a missing branch can be told from an unfetched one."""
    dest = tmp_path / "clone"
    subprocess.run(
        ["git", "clone", "-q", f"file://{rowgate_repo.path}", str(dest)],
        check=True,
        env=rowgate_repo.env,
        capture_output=True,
        timeout=60,
    )
    clone = GitRepo(dest)
    clone.git("config", "commit.gpgsign", "false")
    return clone


def test_no_active_rows_passes_having_read_the_rows(rowgate_repo: GitRepo):
    result = _run(rowgate_repo)
    assert (result.status.value, result.summary, result.examined) == (
        "pass",
        "OK: 0 active rows, 0 claims (1 rows read)",
        1,
    )


def test_no_rows_and_no_claims_examined_nothing(git_repo: GitRepo):
    git_repo.commit("empty", {".agents/config.yaml": "version: 1\n"})
    result = _run(git_repo)
    assert (result.status.value, result.summary) == ("error", "examined 0 rows and claims: nothing was verified")


def test_lr001_active_row_unclaimed(rowgate_repo: GitRepo):
    rowgate_repo.write({".agents/rows/GOV-X.yaml": row_yaml("GOV-X", state="GATING"), ".agents/specs/GOV-X.md": SPEC})
    [f] = _run(rowgate_repo).findings
    assert (f.rule, f.path, f.line, f.message) == (
        "LR001",
        ".agents/rows/GOV-X.yaml",
        4,
        "GOV-X is GATING but has no claim",
    )


@pytest.mark.parametrize(
    "row, message",
    [
        ("GOV-CORE", "claim c1 points at row GOV-CORE, which is READY (active: SPIKE, ACTIVE, GATING)"),
        ("GOV-GONE", "claim c1 points at row GOV-GONE, which does not exist"),
    ],
)
def test_lr003_claim_row_inactive(rowgate_repo: GitRepo, row, message):
    rowgate_repo.write(_claim(row))
    [f] = _run(rowgate_repo).findings
    assert (f.rule, f.path, f.line, f.message) == ("LR003", ".agents/claims/c1.yaml", 2, message)


def test_lr002_claim_not_live(cloned: GitRepo):
    _active(cloned)
    cloned.write(_claim("GOV-X"))
    [f] = _run(cloned).findings
    assert (f.rule, f.path, f.line, f.message) == (
        "LR002",
        ".agents/claims/c1.yaml",
        3,
        "claim c1 on GOV-X is ABANDONED: branch row/GOV-X is not found locally or on "
        "origin, and no commit has named GOV-X since 2026-11-29",
    )


def test_lr002_local_only_mode_fails_without_a_remote(rowgate_repo: GitRepo):
    rowgate_repo.write(
        {".agents/config.yaml": "version: 1\nrows:\n  areas: [GOV, ENGINE]\nlive_rows:\n  remote: null\n"}
    )
    _active(rowgate_repo)
    rowgate_repo.write(_claim("GOV-X"))
    [f] = _run(rowgate_repo).findings
    assert (f.rule, f.message) == (
        "LR002",
        "claim c1 on GOV-X is ABANDONED: branch row/GOV-X is not found locally, and no commit has named GOV-X since 2026-11-29",
    )


@pytest.mark.parametrize("how", ["local", "remote", "commits"])
def test_live_claim_clean_twins(cloned: GitRepo, rowgate_repo: GitRepo, how: str):
    _active(cloned)
    cloned.write(_claim("GOV-X", since="2025-12-31"))
    if how == "local":
        cloned.git("branch", "row/GOV-X")
    elif how == "remote":
        rowgate_repo.git("branch", "row/GOV-X")
        cloned.git("fetch", "-q", "origin")
    else:
        cloned.commit("Work on it\n\nRow: GOV-X\n")  # dated 2026-01-01, after the claim
    result = _run(cloned)
    assert (result.status.value, result.summary) == ("pass", "OK: 1 active rows, 1 claims (2 rows read)")


def test_missing_remote_refs_skip_with_the_reason(rowgate_repo: GitRepo):
    _active(rowgate_repo)
    rowgate_repo.write(_claim("GOV-X"))
    result = _run(rowgate_repo)
    assert (result.status.value, result.summary) == (
        "skip",
        "cannot verify the branches of claims c1: remote 'origin' has no refs here; fetch it or set live_rows.remote",
    )


def test_report_prints_the_table_and_never_fails(cloned: GitRepo):
    _active(cloned)
    cloned.write(_claim("GOV-X"))
    cloned.git("branch", "row/GOV-X")
    result = _run(cloned, report=True)
    assert (result.status.value, result.summary) == ("pass", "OK: 1 active rows, 1 claims (2 rows read)")
    assert result.details == [
        "| row | state | claim | owner | branch | where | verdict | last activity |",
        "|---|---|---|---|---|---|---|---|",
        "| GOV-X | ACTIVE | c1 | ada | row/GOV-X | local | IN-FLIGHT: branch row/GOV-X exists, no commits of its own yet |  |",
        "claims: IN-FLIGHT=1 LANDED=0 ABANDONED=0",
    ]
    cloned.git("branch", "-D", "row/GOV-X")
    result = _run(cloned, report=True)
    assert (result.status.value, result.summary) == ("pass", "OK: report only, 1 findings would fail --check")


def test_script_reports_without_check_and_gates_with_it(cloned: GitRepo):
    _active(cloned)
    cloned.write(_claim("GOV-X"))
    env = {"PATH": "/usr/bin:/bin:/usr/local/bin"}
    script = [sys.executable, str(ROOT / "scripts" / "audit-live-rows.py")]
    report = subprocess.run(script, cwd=cloned.path, capture_output=True, text=True, env=env, timeout=120)
    assert (
        report.returncode == 0
        and "| GOV-X | ACTIVE | c1 | ada | row/GOV-X | missing | ABANDONED: no branch, and no commit names it since "
        in report.stdout
    )
    gate = subprocess.run([*script, "--check"], cwd=cloned.path, capture_output=True, text=True, env=env, timeout=120)
    assert gate.returncode == 1 and ".agents/claims/c1.yaml:3: LR002 claim-not-live: " in gate.stdout


def test_active_states_come_from_the_config(rowgate_repo: GitRepo):
    """rows.active_states decides which rows a claim may point at: READY is active here, so the claim on
    the READY row that fails LR003 under the default states points at an active row."""
    rowgate_repo.write(
        {".agents/config.yaml": MINIMAL_CONFIG + "  active_states: [READY]\n", **_claim("GOV-CORE", branch="main")}
    )
    result = _run(rowgate_repo)
    assert (result.status.value, [f.rule for f in result.findings]) == ("pass", [])
