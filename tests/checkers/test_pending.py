"""The pending path of an outside contribution (checkers/checks/records/pending.py): on a fork clone, the
contributor's branch is judged from its merge base and passes role-discipline with `Refs #N`; the
maintainer's landing merge is judged as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.checkers.contrib_fixture import CONFIG, Contrib, build, rowgate


@pytest.fixture
def contrib(tmp_path: Path) -> Contrib:
    c = build(tmp_path)
    c.clone.git("reset", "-q", "--hard", "upstream/main")  # the branch, rebased, without the anchor breakage
    c.shas["C1"] = c.clone.commit("Tidy the readme\n\nRefs #1\n", {"README.md": "tidy\n"})
    return c


def test_an_outside_branch_with_an_issue_reference_passes_as_pending(contrib: Contrib):
    proc = rowgate("check", "role-discipline", cwd=contrib.clone.path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == "OK: 1 commits (0 merges; 1 pending) reach main through a row (trailer mode)\n"
    u4 = contrib.shas["U4"][:12]
    assert proc.stderr == (
        f"rowgate: base upstream/main (a branch: its merge base with upstream/main) = {u4}; merge base {u4}; "
        f"head {contrib.shas['C1'][:12]}\n"
    )
    record = rowgate("check", "agent-record", cwd=contrib.clone.path)
    assert record.returncode == 0, record.stdout  # #1 is filed under GOV-CORE and listed in its spec


def test_a_pending_commit_that_names_nothing_fails_with_the_way_through(contrib: Contrib):
    sha = contrib.clone.commit("Nothing named\n", {"README.md": "again\n"})
    proc = rowgate("check", "role-discipline", cwd=contrib.clone.path)
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[:2] == [
        f"RD004 pending-without-reference: commit {sha[:12]} is pending (not yet on the protected branch) and "
        "names no row, no issue and no outside-contribution marker",
        "    fix: add `Row: <ROW-ID>` (a row in .agents/rows/) or `Refs #<issue>` (the issue your change answers); "
        "a maintainer lands it with a `Row: <ID>` merge commit",
    ]


def test_the_configured_outside_marker_lets_a_pending_commit_through(contrib: Contrib):
    config = CONFIG + "role:\n  outside_marker: 'Contribution: outside'\n"
    contrib.clone.commit("Configure the marker\n\nRefs #1\n", {".agents/config.yaml": config})
    contrib.clone.commit("Marked\n\nContribution: outside\n", {"README.md": "marked\n"})
    proc = rowgate("check", "role-discipline", cwd=contrib.clone.path)
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout == "OK: 3 commits (0 merges; 3 pending) reach main through a row (trailer mode)\n"


def test_a_pending_reference_to_an_unfiled_issue_fails_agent_record(contrib: Contrib):
    sha = contrib.clone.commit("Unfiled\n\nRefs #9\n", {"README.md": "nine\n"})
    proc = rowgate("check", "agent-record", cwd=contrib.clone.path)
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[0] == (
        f"AR007 issue-ref-without-row: commit {sha[:12]} references #9 but names no row (no Row: trailer)"
    )


def test_the_maintainers_merge_without_a_row_fails_and_with_one_passes(contrib: Contrib):
    up = contrib.upstream
    tip = up.head()
    up.git("fetch", "-q", str(contrib.clone.path), "contrib:contrib")
    up.git("merge", "-q", "--no-ff", "-m", "Merge the contribution", "contrib")
    proc = rowgate("check", "role-discipline", "--base", tip, cwd=up.path)
    assert proc.returncode == 1, proc.stdout
    assert proc.stdout.splitlines()[0] == (
        f"RD001 commit-without-row: commit {contrib.shas['C1'][:12]} names no row (no Row: trailer)"
    )
    up.git("reset", "-q", "--hard", tip)
    up.git("merge", "-q", "--no-ff", "-m", "Merge the contribution\n\nRow: GOV-CORE", "contrib")
    assert rowgate("check", "role-discipline", "--base", tip, cwd=up.path).returncode == 0


def test_on_the_protected_branch_nothing_is_pending(contrib: Contrib):
    """A landing (the protected branch checked out) judges a `Refs #N` commit without a row as before."""
    contrib.clone.git("branch", "-q", "-f", "main", "HEAD")
    contrib.clone.git("checkout", "-q", "main")
    proc = rowgate("check", "role-discipline", "--base", contrib.shas["U4"], cwd=contrib.clone.path)
    assert proc.returncode == 1
    assert proc.stdout.startswith(f"RD001 commit-without-row: commit {contrib.shas['C1'][:12]} names no row")


def test_a_ci_checkout_without_the_local_base_branch_finds_the_protected_branch_upstream(contrib: Contrib):
    """base.ref names a local `main` the checkout lacks (a CI checkout of a pull request): the detected
    upstream holds the protected tip, and the outside commit is still pending."""
    config = contrib.clone.path / ".agents/config.yaml"
    contrib.clone.commit("Base ref\n\nRefs #1\n", {".agents/config.yaml": config.read_text() + "base:\n  ref: main\n"})
    contrib.clone.git("branch", "-q", "-D", "main")
    proc = rowgate("check", "role-discipline", "--base", contrib.shas["U4"], cwd=contrib.clone.path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == "OK: 2 commits (0 merges; 2 pending) reach main through a row (trailer mode)\n"
