"""role-discipline: every rule has a seeded violation on a real repository, and a clean twin."""

from __future__ import annotations

import argparse
import io

import pytest

from checkers.checks.records import role_discipline
from checkers.config import load_config
from checkers.context import Context
from tests.conftest import MINIMAL_CONFIG, GitRepo


def _run(repo: GitRepo, base: str | None = None):
    ctx = Context(root=repo.path, config=load_config(repo.path), env={})
    return role_discipline.run(ctx, argparse.Namespace(base=base, head=None))


def _findings(repo: GitRepo) -> list[tuple[str, str]]:
    result = _run(repo)
    assert result.status.value == "fail", result.summary
    return [(f.rule, f.message) for f in result.findings]


def _configure(repo: GitRepo, mode: str) -> None:
    cutover = repo.head()
    repo.commit(
        "Configure\n\nRow: GOV-CORE\n",
        {".agents/config.yaml": MINIMAL_CONFIG + f"cutover: {cutover}\nrole:\n  mode: {mode}\n"},
    )


@pytest.fixture
def trailer(rowgate_repo: GitRepo) -> GitRepo:
    _configure(rowgate_repo, "trailer")
    return rowgate_repo


@pytest.fixture
def branch(rowgate_repo: GitRepo) -> GitRepo:
    _configure(rowgate_repo, "branch")
    return rowgate_repo


def _merge(repo: GitRepo, name: str, message: str, files: dict[str, str]) -> str:
    repo.git("checkout", "-q", "-b", name)
    for i, (rel, text) in enumerate(files.items()):
        repo.commit(f"Contribution {i}\n", {rel: text})
    repo.git("checkout", "-q", "main")
    repo.git("merge", "-q", "--no-ff", "--no-edit", "-m", message, name)
    return repo.head()


def test_trailer_mode_clean_twin(trailer: GitRepo):
    trailer.commit("Work\n\nRow: GOV-CORE\n")
    result = _run(trailer)
    assert (result.status.value, result.summary, result.examined) == (
        "pass",
        "OK: 2 commits (0 merges) reach main through a row (trailer mode)",
        2,
    )


def test_rd001_commit_without_row(trailer: GitRepo):
    sha = trailer.commit("Work without a row\n")
    assert _findings(trailer) == [("RD001", f"commit {sha[:12]} names no row (no Row: trailer)")]


def test_rd002_commit_unknown_row(trailer: GitRepo):
    sha = trailer.commit("Work\n\nRow: GOV-NOPE\n")
    assert _findings(trailer) == [("RD002", f"commit {sha[:12]} names row GOV-NOPE, which does not exist")]


def test_outside_contribution_is_accepted_through_a_merge_that_names_its_row(trailer: GitRepo):
    _merge(trailer, "contrib", "Merge an outside contribution\n\nRow: GOV-CORE\n", {"a.txt": "1\n", "b.txt": "2\n"})
    result = _run(trailer)
    assert (result.status.value, result.summary) == (
        "pass",
        "OK: 4 commits (1 merges) reach main through a row (trailer mode)",
    )


def test_outside_contribution_without_a_row_merge_fails(trailer: GitRepo):
    _merge(trailer, "contrib", "Merge an outside contribution\n", {"a.txt": "1\n"})
    sha = trailer.head("contrib")
    assert _findings(trailer) == [("RD001", f"commit {sha[:12]} names no row (no Row: trailer)")]


def test_branch_mode_clean_twin(branch: GitRepo):
    # the configuring commit itself landed directly: start the range after it
    base = branch.head()
    _merge(branch, "row/GOV-CORE", "Merge branch 'row/GOV-CORE'\n", {"a.txt": "1\n"})
    _merge(branch, "contrib", "Merge branch 'contrib'\n\nRow: GOV-CORE\n", {"b.txt": "1\n"})
    _merge(branch, "gh", "Merge pull request #7 from someone/row/GOV-CORE\n", {"c.txt": "1\n"})
    result = _run(branch, base=base)
    assert (result.status.value, result.summary) == (
        "pass",
        "OK: 3 commits (3 merges) reach main through a row (branch mode)",
    )


def test_rd003_direct_commit_and_rowless_merge_in_branch_mode(branch: GitRepo):
    base = branch.head()
    direct = branch.commit("Pushed straight to main\n\nRow: GOV-CORE\n")
    merge = _merge(branch, "feature", "Merge branch 'feature'\n", {"a.txt": "1\n"})
    assert [(f.rule, f.message) for f in _run(branch, base=base).findings] == [
        ("RD003", f"commit {direct[:12]} landed on main directly, not through a merge of a row/<ID> branch"),
        ("RD003", f"merge {merge[:12]} merges no row/<ID> branch and names no row"),
    ]


def test_rd002_merge_of_unknown_row_branch(branch: GitRepo):
    base = branch.head()
    merge = _merge(branch, "row/GOV-NOPE", "Merge branch 'row/GOV-NOPE'\n", {"a.txt": "1\n"})
    assert [(f.rule, f.message) for f in _run(branch, base=base).findings] == [
        ("RD002", f"merge {merge[:12]} merges row/GOV-NOPE, but row GOV-NOPE does not exist")
    ]


def test_no_cutover_and_no_base_is_an_error(rowgate_repo: GitRepo):
    result = _run(rowgate_repo)
    assert (result.status.value, result.summary, result.hint) == (
        "error",
        "no range: the config has no cutover and no --base was given",
        "set cutover: in .agents/config.yaml or pass --base REF",
    )


def test_missing_base_is_an_error_with_the_fix(trailer: GitRepo):
    from checkers.results import CheckError

    with pytest.raises(CheckError, match="base 'no-such-ref' does not resolve to a commit"):
        _run(trailer, base="no-such-ref")


def test_shallow_clone_without_the_cutover_is_an_error_with_the_fix(trailer: GitRepo, tmp_path):
    import subprocess

    from checkers.preflight import run_check
    from checkers.registry import get

    trailer.commit("More\n\nRow: GOV-CORE\n")
    dest = tmp_path / "shallow"
    subprocess.run(
        ["git", "clone", "-q", "--depth", "1", f"file://{trailer.path}", str(dest)],
        check=True,
        env=trailer.env,
        capture_output=True,
        timeout=60,
    )
    ctx = Context(root=dest, config=load_config(dest), env={})
    result = run_check(get("role-discipline"), ctx, argparse.Namespace(base=None, head=None))
    cutover = load_config(dest).cutover
    assert (result.status.value, result.summary, result.hint) == (
        "error",
        f"range start (config cutover) {cutover!r} does not resolve to a commit",
        "this is a shallow clone: run git fetch --unshallow (CI: fetch-depth: 0)",
    )


def test_in_a_push_of_a_new_branch_the_base_is_the_configured_base_not_the_cutover(trailer: GitRepo):
    """A pre-push hook judges what is pushed: with no from-ref (a branch new to the remote) the range starts
    at base.ref, so a commit on main after the cutover that names no row is not this push's finding."""
    trailer.commit("Landed without a row\n")
    trailer.write({".agents/config.yaml": (trailer.path / ".agents/config.yaml").read_text() + "base:\n  ref: main\n"})
    main = trailer.commit("Base ref\n\nRow: GOV-CORE\n")
    trailer.git("checkout", "-q", "-b", "feature")
    tip = trailer.commit("Feature\n\nRow: GOV-CORE\n")
    notes = io.StringIO()
    env = {"PRE_COMMIT_FROM_REF": "0" * 40, "PRE_COMMIT_TO_REF": tip, "PRE_COMMIT_REMOTE_BRANCH": "refs/heads/feature"}
    ctx = Context(root=trailer.path, config=load_config(trailer.path), env=env, notes=notes)
    result = role_discipline.run(ctx, argparse.Namespace(base=None, head=None))
    assert (result.status.value, result.summary) == (
        "pass",
        "OK: 1 commits (0 merges; 1 pending) reach main through a row (trailer mode)",
    )
    assert notes.getvalue() == (
        f"rowgate: base main (config base.ref) = {main[:12]}; merge base {main[:12]}; head {tip[:12]}\n"
    )
    assert _run(trailer).status.value == "pass"  # outside a push, on a branch: from its merge base too
    trailer.git("checkout", "-q", "main")
    assert _run(trailer).status.value == "fail"  # on main: every commit since the cutover


# --- scope: topic branches, pull request references, integration paths, configured row ids ------------

PORT = "role:\n  mode: branch\n  branch_prefix: port/\n  topic_branches: true\n  pr_refs: true\n"


def _configure_scope(repo: GitRepo, role: str, rows: str = "") -> str:
    cutover = repo.head()
    repo.commit(
        "Configure\n\nRow: GOV-CORE\n", {".agents/config.yaml": MINIMAL_CONFIG + rows + f"cutover: {cutover}\n" + role}
    )
    return repo.head()


def test_a_topic_branch_merge_and_a_pull_request_pass(rowgate_repo: GitRepo):
    base = _configure_scope(rowgate_repo, PORT)
    _merge(rowgate_repo, "port/tool-parser-lfm2-batch", "Merge branch 'port/tool-parser-lfm2-batch'\n", {"a": "1\n"})
    rowgate_repo.commit("feat(tools): lfm2 batch parser (#123)\n", {"b": "1\n"})
    result = _run(rowgate_repo, base=base)
    assert (result.status.value, result.summary) == (
        "pass",
        "OK: 2 commits (1 merges) reach main through a row (branch mode)",
    )


def test_the_branch_prefix_is_case_exact(rowgate_repo: GitRepo):
    base = _configure_scope(rowgate_repo, PORT)
    merge = _merge(rowgate_repo, "Port/x", "Merge branch 'Port/x'\n", {"a": "1\n"})
    assert [(f.rule, f.message) for f in _run(rowgate_repo, base=base).findings] == [
        ("RD003", f"merge {merge[:12]} merges no port/<ID> branch and names no row")
    ]


def test_without_pr_refs_a_squashed_pull_request_is_a_direct_commit(rowgate_repo: GitRepo):
    base = _configure_scope(rowgate_repo, PORT.replace("pr_refs: true", "pr_refs: false"))
    sha = rowgate_repo.commit("feat: x (#12)\n", {"b": "1\n"})
    assert [f.rule for f in _run(rowgate_repo, base=base).findings] == ["RD003"]
    assert sha[:12] in _run(rowgate_repo, base=base).findings[0].message


def test_a_commit_changing_only_integration_paths_needs_no_row(rowgate_repo: GitRepo):
    base = _configure_scope(rowgate_repo, "role:\n  mode: trailer\n  exempt: ['.agents/**', 'docs/**']\n")
    rowgate_repo.commit("docs: state\n", {".agents/state.md": "x\n", "docs/a.md": "y\n"})
    mixed = rowgate_repo.commit("fix: code and docs\n", {"src/a.c": "x\n", "docs/b.md": "y\n"})
    assert [(f.rule, f.message) for f in _run(rowgate_repo, base=base).findings] == [
        ("RD001", f"commit {mixed[:12]} names no row (no Row: trailer)")
    ]


def test_a_lowercase_row_id_from_the_configured_pattern_matches_its_branch(rowgate_repo: GitRepo):
    rows = "  id_pattern: '[A-Z]+-[A-Za-z0-9.-]+'\n"
    rowgate_repo.commit(
        "Row\n\nRow: GOV-CORE\n",
        {".agents/rows/GOV-lower.yaml": "id: GOV-lower\narea: GOV\ntitle: t\nstate: INVENTORIED\n"},
    )
    base = _configure_scope(
        rowgate_repo,
        "role:\n  mode: branch\n",
        rows,
    )
    _merge(rowgate_repo, "row/GOV-lower", "Merge branch 'row/GOV-lower'\n", {"a": "1\n"})
    nope = _merge(rowgate_repo, "row/GOV-gone", "Merge branch 'row/GOV-gone'\n", {"b": "1\n"})
    assert [(f.rule, f.message) for f in _run(rowgate_repo, base=base).findings] == [
        ("RD002", f"merge {nope[:12]} merges row/GOV-gone, but row GOV-gone does not exist")
    ]
