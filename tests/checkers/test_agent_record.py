"""agent-record: each rule has a seeded violation that fails with exactly its message, and a clean twin."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from checkers.checks.records import agent_record
from checkers.config import load_config
from checkers.context import Context
from tests.conftest import MINIMAL_CONFIG, GitRepo, row_yaml

SPEC = "# {id}\n\n## Goal\nx\n\n## Acceptance\ny\n\n## Issues\n{issues}\n"
STATES = """\
  states:
    SPIKE: {claim: true}
    READY: {spec: true}
    GATING: {spec: true, claim: true, anchors: true}
    DONE: {spec: true, anchors: true, evidence: true, closing_commit: true}
    BLOCKED: {spec: true, blocker: true}
"""


def _run(repo: GitRepo, **kw):
    ctx = Context(root=repo.path, config=load_config(repo.path))
    args = argparse.Namespace(base=kw.get("base"), head=None, message_file=kw.get("message_file"))
    return agent_record.run(ctx, args)


def _one(repo: GitRepo, **kw):
    result = _run(repo, **kw)
    assert result.status.value == "fail", result.summary
    [f] = result.findings
    return (f.rule, f.path, f.line, f.message)


def _row(repo: GitRepo, row_id: str, state: str = "READY", spec_issues: str = "", **extra: str) -> None:
    repo.write(
        {
            f".agents/rows/{row_id}.yaml": row_yaml(row_id, state=state, **extra),
            f".agents/specs/{row_id}.md": SPEC.format(id=row_id, issues=spec_issues),
        }
    )


def _ledger(rows: list[str]) -> str:
    return json.dumps(
        {"schema": 1, "date": "2026-11-29", "kind": "gate", "rows": rows, "command": "pytest", "summary": "green"},
        indent=1,
    )


@pytest.fixture
def repo(rowgate_repo: GitRepo) -> GitRepo:
    """The minimal repository with per-state requirements configured."""
    rowgate_repo.commit("Configure states", {".agents/config.yaml": MINIMAL_CONFIG + STATES})
    return rowgate_repo


def test_clean_repository_passes_with_derived_counts(rowgate_repo: GitRepo):
    result = _run(rowgate_repo)
    assert (result.status.value, result.summary, result.examined) == ("pass", "OK: GOV=1 ENGINE=0", 2)


def test_clean_rows_in_every_state_pass(repo: GitRepo):
    done = repo.head()
    repo.write(
        {
            "src/a.py": "x = 1\ny = 2\n",
            "tests/test_a.py": "def test(): pass\n",
            ".agents/ledger/2026-11-29-a.json": _ledger(["GOV-DONE"]),
            ".agents/claims/c1.yaml": "id: c1\nrow: GOV-GATE\nbranch: row/GOV-GATE\nowner: ada\nsince: 2026-11-29\n",
            ".agents/issues/GOV-DONE/ISSUE-4.md": "---\nnumber: 4\nrow: GOV-DONE\nfiled: 2026-11-29\n---\nx\n",
        }
    )
    _row(repo, "GOV-GATE", "GATING", claim="c1", anchors="[src/a.py:2, tests/test_a.py]")
    repo.write(
        {
            ".agents/rows/GOV-DONE.yaml": row_yaml(
                "GOV-DONE",
                state="DONE",
                anchors="[src/a.py, tests/test_a.py]",
                issues="[4]",
                evidence="[.agents/ledger/2026-11-29-a.json]",
                closing_commit=done,
            ),
            ".agents/specs/GOV-DONE.md": SPEC.format(id="GOV-DONE", issues="- #4"),
        }
    )
    _row(repo, "GOV-BLK", "BLOCKED", blocker="{reason: waits on GOV-DONE, unblock_when: GOV-DONE lands}")
    result = _run(repo)
    assert (result.status.value, result.summary) == ("pass", "OK: GOV=4 ENGINE=0"), result.findings


def test_ar001_record_invalid(rowgate_repo: GitRepo):
    rowgate_repo.write({".agents/rows/GOV-X.yaml": row_yaml("GOV-X", state="WIP")})
    [f] = _run(rowgate_repo).findings
    assert (f.rule, f.path, f.line) == ("AR001", ".agents/rows/GOV-X.yaml", 4)
    assert f.message.startswith("state: 'WIP' is not one of INVENTORIED, SPIKE")


def test_ar002_row_unknown_area(rowgate_repo: GitRepo):
    rowgate_repo.write(
        {
            ".agents/rows/GOV-X.yaml": row_yaml("GOV-X", area="KERNEL"),
            ".agents/specs/GOV-X.md": SPEC.format(id="GOV-X", issues=""),
        }
    )
    assert _one(rowgate_repo) == (
        "AR002",
        ".agents/rows/GOV-X.yaml",
        2,
        "area 'KERNEL' is not one of ['GOV', 'ENGINE']",
    )


@pytest.mark.parametrize(
    "extra, files, line, message",
    [
        ({}, {".agents/specs/GOV-X.md": None}, 5, "spec .agents/specs/GOV-X.md does not exist"),
        ({"claim": "nobody"}, {}, 6, "claim nobody does not exist in .agents/claims/"),
        (
            {"claim": "c1"},
            {".agents/claims/c1.yaml": "id: c1\nrow: GOV-CORE\nbranch: b\nowner: o\nsince: 2026-11-29\n"},
            6,
            "claim c1 is for row GOV-CORE, not GOV-X",
        ),
        ({"anchors": "[src/gone.py]"}, {}, 6, "anchor src/gone.py does not exist in the tree"),
        (
            {"anchors": "[src/a.py:3]"},
            {"src/a.py": "one\ntwo\n"},
            6,
            "anchor src/a.py:3 is out of range (src/a.py has 2 lines)",
        ),
        (
            {"evidence": "[.agents/ledger/none.json]"},
            {},
            6,
            "evidence .agents/ledger/none.json is not a ledger entry under .agents/ledger/",
        ),
        (
            {"evidence": "[.agents/ledger/2026-11-29-a.json]"},
            {".agents/ledger/2026-11-29-a.json": _ledger(["GOV-CORE"])},
            6,
            "ledger entry .agents/ledger/2026-11-29-a.json does not name GOV-X (rows: ['GOV-CORE'])",
        ),
        (
            {"closing_commit": '"' + "0123456789" * 4 + '"'},
            {},
            6,
            "closing commit 012345678901 does not exist in this repository",
        ),
        (
            {"issues": "[7]"},
            {".agents/specs/GOV-X.md": SPEC.format(id="GOV-X", issues="- #7")},
            6,
            "issue #7 has no intake record .agents/issues/GOV-X/ISSUE-7.md",
        ),
    ],
    ids=[
        "spec",
        "claim-missing",
        "claim-other-row",
        "anchor-missing",
        "anchor-range",
        "evidence-missing",
        "evidence-other-row",
        "closing-commit",
        "issue-unfiled",
    ],
)
def test_ar003_row_dangling_reference(rowgate_repo: GitRepo, extra, files, line, message):
    _row(rowgate_repo, "GOV-X", **extra)
    for rel, text in files.items():
        if text is None:
            (rowgate_repo.path / rel).unlink()
        else:
            rowgate_repo.write({rel: text})
    assert _one(rowgate_repo) == ("AR003", ".agents/rows/GOV-X.yaml", line, message)


def test_ar003_filed_issue_missing_from_row(rowgate_repo: GitRepo):
    _row(rowgate_repo, "GOV-X", spec_issues="- #3", issues="[3]")
    rowgate_repo.write(
        {
            ".agents/issues/GOV-X/ISSUE-3.md": "---\nnumber: 3\nrow: GOV-X\nfiled: 2026-11-29\n---\n",
            ".agents/issues/GOV-X/ISSUE-6.md": "---\nnumber: 6\nrow: GOV-X\nfiled: 2026-11-29\n---\n",
        }
    )
    assert _one(rowgate_repo) == (
        "AR003",
        ".agents/rows/GOV-X.yaml",
        6,
        "issue #6 is filed under .agents/issues/GOV-X/ but not in the row's issues: [3]",
    )


def test_ar003_row_issue_missing_from_spec(rowgate_repo: GitRepo):
    _row(rowgate_repo, "GOV-X", spec_issues="- #3", issues="[3, 9]")
    rowgate_repo.write(
        {
            ".agents/issues/GOV-X/ISSUE-3.md": "---\nnumber: 3\nrow: GOV-X\nfiled: 2026-11-29\n---\n",
            ".agents/issues/GOV-X/ISSUE-9.md": "---\nnumber: 9\nrow: GOV-X\nfiled: 2026-11-29\n---\n",
        }
    )
    assert _one(rowgate_repo) == (
        "AR003",
        ".agents/rows/GOV-X.yaml",
        6,
        "issue #9 is not listed in .agents/specs/GOV-X.md",
    )


@pytest.mark.parametrize(
    "rel, text, line, message",
    [
        (
            ".agents/claims/c1.yaml",
            "id: c1\nrow: GOV-NONE\nbranch: b\nowner: o\nsince: 2026-11-29\n",
            2,
            "claim c1 names row GOV-NONE, which does not exist",
        ),
        (
            ".agents/issues/GOV-CORE/ISSUE-2.md",
            "---\nnumber: 3\nrow: GOV-CORE\nfiled: 2026-11-29\n---\n",
            3,
            "intake record of #3 for GOV-CORE is filed as GOV-CORE/ISSUE-2.md",
        ),
        (
            ".agents/issues/GOV-CORE/ISSUE-3.md",
            "---\nnumber: 3\nrow: GOV-NONE\nfiled: 2026-11-29\n---\n",
            3,
            "intake record names row GOV-NONE, which does not exist",
        ),
        (
            ".agents/ledger/2026-11-29-a.json",
            _ledger(["GOV-CORE", "GOV-NONE"]),
            5,
            "ledger entry names unknown rows ['GOV-NONE']",
        ),
        (".agents/specs/GOV-ORPHAN.md", "# x\n", None, "spec belongs to no row (no row's spec: names it)"),
    ],
    ids=["claim", "issue-misfiled", "issue-row", "ledger", "orphan-spec"],
)
def test_ar003_record_dangling_reference(rowgate_repo: GitRepo, rel, text, line, message):
    rowgate_repo.write({rel: text})
    assert _one(rowgate_repo) == ("AR003", rel, line, message)


@pytest.mark.parametrize(
    "state, extra, message",
    [
        ("SPIKE", {}, "state SPIKE needs a live claim: claim is null"),
        (
            "GATING",
            {"claim": "c1", "anchors": "[src/a.py]"},
            "state GATING needs code and test anchors: no test anchor among ['src/a.py']",
        ),
        (
            "GATING",
            {"claim": "c1", "anchors": "[tests/test_a.py]"},
            "state GATING needs code and test anchors: no code anchor among ['tests/test_a.py']",
        ),
        (
            "DONE",
            {"anchors": "[src/a.py, tests/test_a.py]", "closing_commit": "HEAD"},
            "state DONE needs ledger evidence: evidence is empty",
        ),
        (
            "DONE",
            {"anchors": "[src/a.py, tests/test_a.py]", "evidence": "[.agents/ledger/2026-11-29-a.json]"},
            "state DONE needs a closing commit: closing_commit is null",
        ),
        (
            "DONE",
            {
                "anchors": "[src/a.py, tests/test_a.py]",
                "evidence": "[.agents/ledger/2026-11-29-a.json]",
                "closing_commit": "SIDE",
            },
            "state DONE needs a closing commit that is an ancestor of HEAD: {side} is not an ancestor of HEAD",
        ),
        ("BLOCKED", {}, "state BLOCKED needs a blocker and an unblocking condition: blocker is null"),
    ],
    ids=[
        "spike-claim",
        "gating-test-anchor",
        "gating-code-anchor",
        "done-evidence",
        "done-commit",
        "done-ancestor",
        "blocked",
    ],
)
def test_ar004_row_state_unmet(repo: GitRepo, state, extra, message):
    side = ""
    if extra.get("closing_commit") == "SIDE":
        repo.git("checkout", "-q", "-b", "side")
        side = repo.commit("side work")
        repo.git("checkout", "-q", "main")
        extra = {**extra, "closing_commit": side}
    repo.write(
        {
            "src/a.py": "x\n",
            "tests/test_a.py": "y\n",
            ".agents/ledger/2026-11-29-a.json": _ledger(["GOV-X"]),
            ".agents/claims/c1.yaml": "id: c1\nrow: GOV-X\nbranch: b\nowner: o\nsince: 2026-11-29\n",
        }
    )
    if extra.get("closing_commit") == "HEAD":
        extra = {**extra, "closing_commit": repo.head()}
    _row(repo, "GOV-X", state, **extra)
    assert _one(repo) == ("AR004", ".agents/rows/GOV-X.yaml", 4, message.format(side=side[:12]))


def test_ar004_spec_sections(repo: GitRepo):
    repo.write({".agents/rows/GOV-X.yaml": row_yaml("GOV-X"), ".agents/specs/GOV-X.md": "# GOV-X\n\n## Goal\nx\n"})
    assert _one(repo) == (
        "AR004",
        ".agents/rows/GOV-X.yaml",
        4,
        "state READY needs a spec with sections Goal, "
        "Acceptance, Issues: .agents/specs/GOV-X.md lacks Acceptance, Issues",
    )


# --- the three places: commit or PR body, intake record, spec -------------------------------------


@pytest.fixture
def ranged(rowgate_repo: GitRepo) -> GitRepo:
    """A repository whose config cutover is its first commit, with issue #1 filed under GOV-CORE."""
    cutover = rowgate_repo.head()
    rowgate_repo.commit(
        "File issue 1\n\nRow: GOV-CORE\n",
        {
            ".agents/config.yaml": MINIMAL_CONFIG + f"cutover: {cutover}\n",
            ".agents/rows/GOV-CORE.yaml": row_yaml("GOV-CORE", issues="[1]"),
            ".agents/issues/GOV-CORE/ISSUE-1.md": "---\nnumber: 1\nrow: GOV-CORE\nfiled: 2026-11-29\n---\n# one\n",
        },
    )
    return rowgate_repo


def test_issue_refs_in_range_clean_twin(ranged: GitRepo):
    ranged.commit("Fix the thing\n\nCloses #1.\n\nRow: GOV-CORE\n")
    result = _run(ranged)
    assert (result.status.value, result.summary, result.examined, result.unit) == (
        "pass",
        "OK: GOV=1 ENGINE=0",
        5,
        "items (3 records, 2 commits)",
    )


@pytest.mark.parametrize(
    "message, rule, text",
    [
        ("Work\n\nRefs #2\n\nRow: GOV-CORE\n", "AR005", "references #2 but no intake record is filed under GOV-CORE"),
        (
            "Work\n\nFixes #1\n\nRow: GOV-OTHER\n",
            "AR005",
            "references #1 but no intake record is filed under GOV-OTHER",
        ),
        ("Work on it, fixes #1\n", "AR007", "references #1 but names no row (no Row: trailer)"),
    ],
    ids=["unfiled", "other-row", "no-row"],
)
def test_issue_refs_in_range(ranged: GitRepo, message, rule, text):
    sha = ranged.commit(message)
    assert _one(ranged) == (rule, None, None, f"commit {sha[:12]} {text}")


def test_ar006_issue_ref_not_in_spec(ranged: GitRepo):
    ranged.write({".agents/specs/GOV-CORE.md": "# GOV-CORE\n\n## Goal\nx\n\n## Acceptance\ny\n\n## Issues\n"})
    sha = ranged.commit("Work\n\nRefs #1\n\nRow: GOV-CORE\n")
    assert (
        [(f.rule, f.message) for f in _run(ranged).findings]
        == [
            ("AR003", "issue #1 is not listed in .agents/specs/GOV-CORE.md"),  # the row's own record disagrees too
            (
                "AR006",
                f"commit {sha[:12]} references #1, filed under GOV-CORE, but .agents/specs/GOV-CORE.md "
                "does not list #1",
            ),
        ]
    )


def test_base_flag_limits_the_range(ranged: GitRepo):
    ranged.commit("Old\n\nRefs #2\n\nRow: GOV-CORE\n")
    base = ranged.head()
    ranged.commit("New\n\nRefs #1\n\nRow: GOV-CORE\n")
    result = _run(ranged, base=base)
    assert (result.status.value, result.unit) == ("pass", "items (3 records, 1 commits)")


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "records"


@pytest.mark.parametrize(
    "name, expected",
    [
        ("pr-body-unfiled-issue.md", ("AR005", "message references #4 but no intake record is filed under GOV-CORE")),
        ("pr-body-without-row.md", ("AR007", "message references #1 but names no row (no Row: trailer)")),
    ],
)
def test_message_file_checks_a_pr_body(ranged: GitRepo, name, expected):
    body = FIXTURES / name
    assert _one(ranged, message_file=body) == (expected[0], str(body), None, expected[1])


def test_message_file_clean_twin(ranged: GitRepo):
    result = _run(ranged, message_file=FIXTURES / "pr-body-clean.md")
    assert (result.status.value, result.unit) == ("pass", "items (3 records, 1 message)")


def test_missing_message_file_and_unresolvable_cutover_are_errors(ranged: GitRepo, tmp_path: Path):
    from checkers.preflight import run_check
    from checkers.registry import get

    ctx = Context(root=ranged.path, config=load_config(ranged.path))
    args = argparse.Namespace(base=None, head=None, message_file=tmp_path / "missing.md")
    result = run_check(get("agent-record"), ctx, args)
    assert (result.status.value, result.summary) == (
        "error",
        f"cannot read --message-file {tmp_path / 'missing.md'}: No such file or directory",
    )
    ranged.write({".agents/config.yaml": MINIMAL_CONFIG + "cutover: " + "ab" * 20 + "\n"})
    ctx = Context(root=ranged.path, config=load_config(ranged.path))
    result = run_check(get("agent-record"), ctx, argparse.Namespace(base=None, head=None, message_file=None))
    assert (result.status.value, result.summary) == (
        "error",
        f"range start (config cutover) {'ab' * 20!r} does not resolve to a commit",
    )


def test_ar009_ledger_record_oversize(rowgate_repo: GitRepo):
    """The rule's own cases (the cap from config, exemptions) are in test_ledger_size.py; here it is one
    finding of the whole check, beside the others."""
    text = _ledger(["GOV-CORE"])
    big = text.replace('"green"', '"' + "g" * (9216 - len(text) + 5) + '"')
    rowgate_repo.write({".agents/ledger/2026-12-05-big.json": big})
    assert _one(rowgate_repo) == ("AR009", ".agents/ledger/2026-12-05-big.json", None, "9216 bytes (cap 8192)")


def test_the_repository_own_records_pass():
    root = Path(__file__).resolve().parents[2]
    result = agent_record.run(
        Context(root=root, config=load_config(root)), argparse.Namespace(base=None, head=None, message_file=None)
    )
    assert result.status.value == "pass", result.findings


def test_issue_reference_forms():
    from checkers.checks.records.issuerefs import body_rows, issue_refs, ref_pattern

    pattern = ref_pattern(["Refs", "Closes", "Fixes"])
    text = "Closes: #5, #7 and #9\nfixes #3. Refs #5\nSee #12 and PR#4; prefixes #8\n\nRow: GOV-A\nRow: GOV-B\n"
    assert issue_refs(text, pattern) == [5, 7, 9, 3]
    assert body_rows(text) == ("GOV-A", "GOV-B")


def test_a_row_gets_both_kinds_of_finding_each_at_its_own_key(repo: GitRepo):
    """rowreqs returns agent-record's findings itself: the unmet state at the `state:` line, the dangling
    reference at the key that holds it."""
    repo.write(
        {
            ".agents/rows/GOV-X.yaml": row_yaml("GOV-X", state="GATING", anchors="[src/gone.py]"),
            ".agents/specs/GOV-X.md": SPEC.format(id="GOV-X", issues=""),
        }
    )
    result = _run(repo)
    assert [(f.rule, f.path, f.line, f.message) for f in result.findings] == [
        ("AR004", ".agents/rows/GOV-X.yaml", 4, "state GATING needs a live claim: claim is null"),
        (
            "AR004",
            ".agents/rows/GOV-X.yaml",
            4,
            "state GATING needs code and test anchors: no test anchor among ['src/gone.py']",
        ),
        ("AR003", ".agents/rows/GOV-X.yaml", 6, "anchor src/gone.py does not exist in the tree"),
    ]
