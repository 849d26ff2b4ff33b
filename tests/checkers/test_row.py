"""`rowgate row new|set` and `rowgate claim` on real repositories: edits keep comments and order, and a
state change whose requirements are not met is refused with the reasons."""

from __future__ import annotations

import argparse
import json

import pytest

from checkers.checks.records import agent_record, live_rows
from checkers.cli import main
from checkers.config import load_config
from checkers.context import Context
from tests.conftest import MINIMAL_CONFIG, GitRepo

STATES = """\
  states:
    SPIKE: {claim: true}
    READY: {spec: true}
    ACTIVE: {spec: true, claim: true}
    DONE: {spec: true, anchors: true, evidence: true, closing_commit: true}
"""


@pytest.fixture
def repo(rowgate_repo: GitRepo) -> GitRepo:
    rowgate_repo.commit("States\n", {".agents/config.yaml": MINIMAL_CONFIG + STATES})
    return rowgate_repo


def rowgate(repo: GitRepo, *args: str) -> int:
    return main([*args, "--repo", str(repo.path)])


def _status(repo: GitRepo, module) -> str:
    ctx = Context(root=repo.path, config=load_config(repo.path), env={})
    result = module.run(ctx, argparse.Namespace(base=None, head=None, message_file=None, check=True, report=False))
    return f"{result.status.value}: {result.summary} {[f.message for f in result.findings]}"


def test_row_new_writes_a_valid_row_and_spec(repo: GitRepo, capsys):
    assert rowgate(repo, "row", "new", "GOV-NEW", "--area", "GOV", "--title", 'Say "hi"') == 0
    row = (repo.path / ".agents/rows/GOV-NEW.yaml").read_text()
    assert row.splitlines()[1:5] == ["id: GOV-NEW", "area: GOV", 'title: "Say \\"hi\\""', "state: INVENTORIED"]
    assert (repo.path / ".agents/specs/GOV-NEW.md").read_text() == (
        '# GOV-NEW: Say "hi"\n\n## Goal\n\n## Acceptance\n\n## Issues\n\n'
    )
    assert _status(repo, agent_record) == "pass: OK: GOV=2 ENGINE=0 []"


@pytest.mark.parametrize(
    "args, message",
    [
        (["GOV-CORE", "--area", "GOV"], "rowgate: .agents/rows/GOV-CORE.yaml already exists\n"),
        (["GOV-X", "--area", "KERNEL"], "rowgate: area 'KERNEL' is not one of ['GOV', 'ENGINE']\n"),
        (["gov-x", "--area", "GOV"], "rowgate: row id 'gov-x' must be AREA-NAME with AREA one of ['GOV', 'ENGINE']\n"),
    ],
)
def test_row_new_refuses_bad_input(repo: GitRepo, capsys, args, message):
    assert rowgate(repo, "row", "new", *args, "--title", "t") == 2
    assert capsys.readouterr().err == message


def test_row_set_refuses_unmet_requirements_and_writes_nothing(repo: GitRepo, capsys):
    before = (repo.path / ".agents/rows/GOV-CORE.yaml").read_text()
    assert rowgate(repo, "row", "set", "GOV-CORE", "--state", "DONE") == 1
    assert capsys.readouterr().err.splitlines() == [
        "rowgate: refusing to move GOV-CORE to DONE; unmet:",
        "  - state DONE needs code and test anchors: no test anchor among [] (fix: add a test path (path or "
        "path:line) to anchors:)",
        "  - state DONE needs ledger evidence: evidence is empty (fix: add the ledger entries "
        "(.agents/ledger/<date>-<slug>.json) that prove it to evidence:)",
        "  - state DONE needs a closing commit: closing_commit is null (fix: set closing_commit: to the full sha "
        "of the commit that finished the row)",
    ]
    assert (repo.path / ".agents/rows/GOV-CORE.yaml").read_text() == before


def test_row_set_keeps_comments_and_order(repo: GitRepo):
    path = repo.path / ".agents/rows/GOV-CORE.yaml"
    text = "# a comment that stays\n" + path.read_text().replace("state: READY", "state: READY  # why it is here")
    path.write_text(text + "issues: [1]\n")
    repo.write({".agents/issues/GOV-CORE/ISSUE-1.md": "---\nnumber: 1\nrow: GOV-CORE\nfiled: 2026-11-29\n---\n"})
    assert rowgate(repo, "row", "set", "GOV-CORE", "--state", "INVENTORIED") == 0
    # the comment stays on its line; ruamel keeps its column where the longer value allows
    assert path.read_text() == text.replace("state: READY  #", "state: INVENTORIED #") + "issues: [1]\n"


def test_row_set_done_with_its_evidence(repo: GitRepo):
    closing = repo.head()
    repo.write(
        {
            "src/a.py": "x\n",
            "tests/test_a.py": "y\n",
            ".agents/ledger/2026-11-29-a.json": json.dumps(
                {
                    "schema": 1,
                    "date": "2026-11-29",
                    "kind": "gate",
                    "rows": ["GOV-CORE"],
                    "command": "x",
                    "summary": "s",
                }
            ),
        }
    )
    assert (
        rowgate(
            repo,
            "row",
            "set",
            "GOV-CORE",
            "--state",
            "DONE",
            "--anchor",
            "src/a.py:1",
            "--anchor",
            "tests/test_a.py",
            "--evidence",
            ".agents/ledger/2026-11-29-a.json",
            "--closing-commit",
            closing,
        )
        == 0
    )
    assert _status(repo, agent_record) == "pass: OK: GOV=1 ENGINE=0 []"


def test_claim_activates_the_row_and_release_removes_it(repo: GitRepo, capsys):
    repo.git("branch", "row/GOV-CORE")
    assert rowgate(repo, "claim", "GOV-CORE", "--branch", "row/GOV-CORE", "--owner", "ada") == 0
    row = (repo.path / ".agents/rows/GOV-CORE.yaml").read_text()
    assert "state: ACTIVE\n" in row and "claim: GOV-CORE\n" in row
    assert (repo.path / ".agents/claims/GOV-CORE.yaml").is_file()
    assert _status(repo, agent_record) == "pass: OK: GOV=1 ENGINE=0 []"
    assert _status(repo, live_rows) == "pass: OK: 1 active rows, 1 claims (1 rows read) []"
    assert rowgate(repo, "claim", "GOV-CORE", "--branch", "x", "--owner", "bob") == 1
    assert "rowgate: GOV-CORE is already claimed (GOV-CORE)" in capsys.readouterr().err
    assert rowgate(repo, "row", "set", "GOV-CORE", "--state", "READY") == 0
    assert not (repo.path / ".agents/claims/GOV-CORE.yaml").exists()
    assert "claim: null\n" in (repo.path / ".agents/rows/GOV-CORE.yaml").read_text()
    assert _status(repo, live_rows) == "pass: OK: 0 active rows, 0 claims (1 rows read) []"


def test_unknown_row_is_refused(repo: GitRepo, capsys):
    assert rowgate(repo, "row", "set", "GOV-NONE", "--state", "READY") == 2
    assert capsys.readouterr().err == (
        "rowgate: no row GOV-NONE: .agents/rows/GOV-NONE.yaml does not exist (create it with `rowgate row new`)\n"
    )


def test_claim_refuses_a_non_active_target_state(repo: GitRepo, capsys):
    assert rowgate(repo, "claim", "GOV-CORE", "--branch", "b", "--owner", "ada", "--state", "DONE") == 2
    assert capsys.readouterr().err == "rowgate: --state DONE is not an active state (SPIKE, ACTIVE, GATING)\n"
    assert not (repo.path / ".agents/claims").exists()


def test_claim_without_owner_takes_gits_user_name(repo: GitRepo, monkeypatch, capsys):
    """The README's `rowgate claim GOV-X --branch row/GOV-X` as written: no --owner, no $USER (a container)."""
    for var in ("ROWGATE_OWNER", "USER", "LOGNAME"):
        monkeypatch.delenv(var, raising=False)
    repo.git("config", "user.name", "Ada Tester")
    assert rowgate(repo, "claim", "GOV-CORE", "--branch", "row/GOV-CORE") == 0
    assert 'owner: "Ada Tester"\n' in (repo.path / ".agents/claims/GOV-CORE.yaml").read_text()
    assert "GOV-CORE: claimed as GOV-CORE by Ada Tester on row/GOV-CORE" in capsys.readouterr().out
