"""role-discipline's scope settings: topic branches under a case-exact prefix, pull request references,
integration paths that need no row, and row ids from rows.id_pattern (vllm.cpp's `port/<topic>` merges)."""

from __future__ import annotations

from tests.checkers.test_role_discipline import _merge, _run
from tests.conftest import MINIMAL_CONFIG, GitRepo

PORT = "role:\n  mode: branch\n  branch_prefix: port/\n  topic_branches: true\n  pr_refs: true\n"


def _configure(repo: GitRepo, role: str, rows: str = "") -> str:
    cutover = repo.head()
    repo.commit(
        "Configure\n\nRow: GOV-CORE\n", {".agents/config.yaml": MINIMAL_CONFIG + rows + f"cutover: {cutover}\n" + role}
    )
    return repo.head()


def test_a_topic_branch_merge_and_a_pull_request_pass(rowgate_repo: GitRepo):
    base = _configure(rowgate_repo, PORT)
    _merge(rowgate_repo, "port/tool-parser-lfm2-batch", "Merge branch 'port/tool-parser-lfm2-batch'\n", {"a": "1\n"})
    rowgate_repo.commit("feat(tools): lfm2 batch parser (#123)\n", {"b": "1\n"})
    result = _run(rowgate_repo, base=base)
    assert (result.status.value, result.summary) == (
        "pass",
        "OK: 2 commits (1 merges) reach main through a row (branch mode)",
    )


def test_the_branch_prefix_is_case_exact(rowgate_repo: GitRepo):
    base = _configure(rowgate_repo, PORT)
    merge = _merge(rowgate_repo, "Port/x", "Merge branch 'Port/x'\n", {"a": "1\n"})
    assert [(f.rule, f.message) for f in _run(rowgate_repo, base=base).findings] == [
        ("RD003", f"merge {merge[:12]} merges no port/<ID> branch and names no row")
    ]


def test_without_pr_refs_a_squashed_pull_request_is_a_direct_commit(rowgate_repo: GitRepo):
    base = _configure(rowgate_repo, PORT.replace("pr_refs: true", "pr_refs: false"))
    sha = rowgate_repo.commit("feat: x (#12)\n", {"b": "1\n"})
    assert [f.rule for f in _run(rowgate_repo, base=base).findings] == ["RD003"]
    assert sha[:12] in _run(rowgate_repo, base=base).findings[0].message


def test_a_commit_changing_only_integration_paths_needs_no_row(rowgate_repo: GitRepo):
    base = _configure(rowgate_repo, "role:\n  mode: trailer\n  exempt: ['.agents/**', 'docs/**']\n")
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
    base = _configure(
        rowgate_repo,
        "role:\n  mode: branch\n",
        rows,
    )
    _merge(rowgate_repo, "row/GOV-lower", "Merge branch 'row/GOV-lower'\n", {"a": "1\n"})
    nope = _merge(rowgate_repo, "row/GOV-gone", "Merge branch 'row/GOV-gone'\n", {"b": "1\n"})
    assert [(f.rule, f.message) for f in _run(rowgate_repo, base=base).findings] == [
        ("RD002", f"merge {nope[:12]} merges row/GOV-gone, but row GOV-gone does not exist")
    ]
