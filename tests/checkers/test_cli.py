"""The rowgate command line: usage errors, exit codes, formats, on real temporary repositories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, GitRepo, row_yaml


def rowgate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "checkers", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin:/usr/local/bin"},
        timeout=120,
    )


def test_unknown_check_exits_2_and_names_the_known_ones(rowgate_repo: GitRepo):
    proc = rowgate("check", "no-such-check", cwd=rowgate_repo.path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("rowgate: unknown check 'no-such-check'; known checks: agent-record")


def test_check_passes_with_exit_0(rowgate_repo: GitRepo):
    proc = rowgate("check", "agent-record", cwd=rowgate_repo.path)
    assert (proc.returncode, proc.stdout) == (0, "OK: GOV=1 ENGINE=0\n")


def test_check_fails_with_exit_1(rowgate_repo: GitRepo):
    rowgate_repo.write({".agents/rows/GOV-BAD.yaml": row_yaml("GOV-BAD", area="NOPE")})
    proc = rowgate("check", "agent-record", cwd=rowgate_repo.path)
    assert proc.returncode == 1
    assert (
        proc.stdout.splitlines()[0]
        == ".agents/rows/GOV-BAD.yaml:2: AR002 row-unknown-area: area 'NOPE' is not one of ['GOV', 'ENGINE']"
    )


def test_bad_config_exits_3_naming_file_and_line(rowgate_repo: GitRepo):
    rowgate_repo.write({".agents/config.yaml": "version: 1\nrowz: {}\n"})
    proc = rowgate("preflight", cwd=rowgate_repo.path)
    assert (proc.returncode, proc.stderr) == (
        3,
        "rowgate: .agents/config.yaml:2: rowz: unknown key (did you mean 'rows'?)\n",
    )


def test_bad_option_exits_2(rowgate_repo: GitRepo):
    assert rowgate("check", "agent-record", "--format", "yaml", cwd=rowgate_repo.path).returncode == 2
    assert rowgate("preflight", "--only", "nope", cwd=rowgate_repo.path).returncode == 2


def test_not_a_repository_exits_3(tmp_path: Path):
    proc = rowgate("preflight", cwd=tmp_path)
    assert proc.returncode == 3 and "is not inside a git repository" in proc.stderr


def test_preflight_json_emits_the_documented_schema(rowgate_repo: GitRepo):
    proc = rowgate("preflight", "--format", "json", "--only", "agent-record", cwd=rowgate_repo.path)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["schema"] == "rowgate.results/1" and doc["exit_code"] == 0
    [result] = doc["results"]
    assert (result["check"], result["status"], result["examined"]) == ("agent-record", "pass", 2)


def test_rules_lists_ids_and_explains_by_name(rowgate_repo: GitRepo):
    proc = rowgate("rules", "row-unknown-area", cwd=rowgate_repo.path)
    assert proc.stdout.startswith("AR002 row-unknown-area (agent-record): ")
    assert rowgate("rules", "ZZ999", cwd=rowgate_repo.path).returncode == 2


def test_config_schema_and_doctor(rowgate_repo: GitRepo):
    schema = json.loads(rowgate("config", "schema", cwd=rowgate_repo.path).stdout)
    assert schema["title"] == "rowgate config (.agents/config.yaml, or [tool.rowgate] in pyproject.toml)"
    doctor = rowgate("doctor", cwd=rowgate_repo.path)
    assert doctor.returncode == 0 and "config:     .agents/config.yaml (found): valid" in doctor.stdout.splitlines()


def test_doctor_reports_head_and_a_shallow_history(rowgate_repo: GitRepo, tmp_path: Path):
    rowgate_repo.commit("second")
    shallow = tmp_path / "shallow"
    subprocess.run(
        ["git", "clone", "-q", "--depth", "1", f"file://{rowgate_repo.path}", str(shallow)],
        check=True,
        env=rowgate_repo.env,
        capture_output=True,
    )
    doctor = rowgate("doctor", cwd=shallow)
    lines = doctor.stdout.splitlines()
    assert doctor.returncode == 1
    assert "history:    SHALLOW: range checks cannot verify; run git fetch --unshallow" in lines
    assert any(line.startswith("head:       ") and "on branch main; origin (" in line for line in lines)


def test_doctor_without_git_on_path_says_so_and_exits_3(tmp_path: Path):
    """It used to crash with FileNotFoundError before printing its first line."""
    proc = subprocess.run(
        [sys.executable, "-m", "checkers", "doctor"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": str(tmp_path)},
        timeout=120,
    )
    assert (proc.returncode, proc.stdout.splitlines()[0], proc.stderr) == (
        3,
        "git:        not found: install git 2.30 or newer",
        "",
    )


@pytest.mark.parametrize("args", [("rules",), ("check", "agent-record"), ("check", "--help"), ("rules", "TR001")])
def test_output_closed_early_ends_quietly_with_the_sigpipe_status(rowgate_repo: GitRepo, args: tuple[str, ...]):
    """`rowgate rules | head`: the reader is gone before rowgate writes (the read end of a real pipe is
    closed first), so every write fails with EPIPE; rowgate says nothing and exits 141, as a Unix tool
    that SIGPIPE ends."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "checkers", *args],
            cwd=rowgate_repo.path,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin:/usr/local/bin"},
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (141, "")


def test_a_reader_that_stops_after_a_line_gets_that_line_and_no_error(rowgate_repo: GitRepo):
    """The shell's `rowgate rules | head -1`, with head's pipe: the first line arrives, nothing is said
    on stderr."""
    proc = subprocess.run(
        f"{sys.executable} -m checkers rules | head -1",
        shell=True,
        cwd=rowgate_repo.path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin:/usr/local/bin"},
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout.startswith("AR001 ") and proc.stderr == ""
