"""`rowgate init` on a repository whose records are markdown tables (the vllm.cpp excerpt): it finds the
matrices and the claims table, says why, and the config it writes makes the record checks run."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from checkers.checks.records import agent_record
from checkers.config import load_config
from checkers.context import Context
from tests.checkers.vllmcpp_excerpt import excerpt_repo

ROOT = Path(__file__).resolve().parents[2]
AGENTS = "# Agents\n\nRows live in engine-matrix.md, model-matrix.md, quantization-matrix.md, kernel-matrix.md and backend-matrix.md.\n"


def _init(repo, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "checkers", "init", *extra],
        cwd=repo.path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _repo(tmp_path: Path):
    repo = excerpt_repo(tmp_path / "repo", **{"AGENTS.md": AGENTS})
    repo.git("rm", "-q", ".agents/config.yaml")
    repo.commit("no config yet")
    return repo


def test_init_finds_the_tables_and_says_why(tmp_path: Path):
    out = _init(_repo(tmp_path), "--yes")
    assert out.returncode == 0, out.stderr
    assert ".agents/engine-matrix.md: 3 rows in 1 tables (ID, State and Owner columns); area ENGINE" in out.stdout
    assert ".agents/coordination.md: the claims table (header line 3), CLAIM-* ids" in out.stdout
    assert "areas in the order AGENTS.md names their files: ENGINE, MODEL, QUANT, KERNEL, BACKEND" in out.stdout
    assert ".agents/engine-matrix.md: a per-state summary table (Area | Rows | states, a Total line)" in out.stdout
    assert "agent-record     enabled: the records in the markdown tables under .agents/ (sources:)" in out.stdout


def test_the_config_init_writes_makes_agent_record_count_the_matrices(tmp_path: Path):
    repo = _repo(tmp_path)
    assert _init(repo, "--yes").returncode == 0
    ctx = Context(root=repo.path, config=load_config(repo.path))
    result = agent_record.run(ctx, argparse.Namespace(base=None, head=None, message_file=None))
    assert (result.status.value, result.summary) == ("pass", "OK: ENGINE=3 MODEL=2 QUANT=1 KERNEL=1 BACKEND=1")
    config = load_config(repo.path)
    assert config.rows.active_states == ["ACTIVE"] and config.sources.claims.tables
    assert config.rows.state_order[:3] == ["INVENTORIED", "ACTIVE", "PARTIAL"]


def test_without_tables_the_record_checks_stay_disabled(git_repo):
    git_repo.commit("init", {"README.md": "# x\n", ".agents/notes.md": "| a | b |\n|---|---|\n| 1 | 2 |\n"})
    out = _init(git_repo, "--dry-run")
    assert "agent-record: {enabled: false}" in out.stdout


PROTOCOL = "Work {n}\n\nFOLLOWING_AGENTS_PROTOCOL\n\nFollowing-Agents-Protocol: true\nAI-Assisted: false\n"


def _trailers(repo) -> tuple[int, str]:
    out = subprocess.run(
        [sys.executable, "-m", "checkers", "check", "commit-trailers"],
        cwd=repo.path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return out.returncode, out.stdout


def test_the_commit_init_tells_the_user_to_make_passes_the_contract_it_configured(git_repo):
    for n in range(5):
        git_repo.commit(PROTOCOL.format(n=n), {f"f{n}.txt": "x\n"})
    out = _init(git_repo, "--yes")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    start = lines.index("  git add .agents/config.yaml && git commit -F - <<'EOF'")
    message = "\n".join(line[2:] for line in lines[start + 1 : lines.index("  EOF")]) + "\n"
    assert message.startswith("Add the rowgate configuration\n\nFOLLOWING_AGENTS_PROTOCOL\n")
    git_repo.commit(message)
    assert _trailers(git_repo)[0] == 0
    # the twin: the bare `git commit` init used to suggest is judged by the contract, and fails it
    git_repo.commit("Add the rowgate configuration\n", {"g.txt": "x\n"})
    code, text = _trailers(git_repo)
    assert code == 1 and "Following-Agents-Protocol" in text


def test_init_counts_the_commits_the_chosen_contract_rejects(git_repo):
    # Assisted-by trailers choose the agents-protocol preset, but these messages lack its paragraph and
    # its two trailers: every one of them breaks the contract, and init says so
    for n in range(5):
        git_repo.commit(f"Work {n}\n\nAssisted-by: Claude:opus [tool]\n", {f"f{n}.txt": "x\n"})
    out = _init(git_repo, "--dry-run")
    assert "(5 of the 5 commits by people read break them; merges and bots not counted)" in out.stdout


def test_init_names_a_cmake_feature_table_and_what_it_lacks(git_repo):
    from tests.checkers.test_gencode import CMAKE_TABLE

    git_repo.commit("cuda", {"cmake/CudaArchFeatures.cmake": CMAKE_TABLE, "src/vt/cuda/a.cu": "// a\n"})
    out = _init(git_repo, "--dry-run")
    assert (
        "1 CUDA sources and the CMake feature table cmake/CudaArchFeatures.cmake (fp4-mma, marlin-nvfp4); "
        "it names no sources: set gencode.table to it and map each source to its feature under gencode.sources"
    ) in out.stdout


MARKED = "Work {n}\n\nFOLLOWING_AGENTS_PROTOCOL\n"


def test_init_writes_the_legacy_rule_the_older_commits_keep_so_a_history_run_examines_them(git_repo):
    # every commit keeps the marker paragraph but not the preset's trailers: the contract breaks all of them,
    # and the legacy rule (the marker) is what a run over the history judges them by
    for n in range(5):
        git_repo.commit(MARKED.format(n=n), {f"f{n}.txt": "x\n"})
    out = _init(git_repo, "--yes")
    assert "legacy: the FOLLOWING_AGENTS_PROTOCOL paragraph: 5 of the 5 commits read keep it" in out.stdout
    # the commits before the cutover alone: with no legacy rule this run examined nothing (exit 3)
    history = subprocess.run(
        [sys.executable, "-m", "checkers", "check", "commit-trailers", "--range", "HEAD~4..HEAD"],
        cwd=git_repo.path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert history.returncode == 0, history.stdout + history.stderr
    assert "OK: 4 commits" in history.stdout and "4 before the cutover" in history.stdout
