"""pr-body: the trailer contract (filled in) and the issue references of a PR body, one seeded fixture per
rule in tests/fixtures/pr_body/ and a good twin, on a real repository."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import GIT_ENV, ROOT, GitRepo, init_repo, row_yaml

FIXTURES = ROOT / "tests" / "fixtures" / "pr_body"
CONFIG = "version: 1\nrows:\n  areas: [GOV]\ntrailers:\n  presets: [row]\n"
SPEC = "# GOV-CORE\n\n## Goal\nx\n\n## Acceptance\ny\n\n## Issues\n- #1\n- #2\n"


def issue(n: int, state: str) -> str:
    return f"---\nnumber: {n}\nrow: GOV-CORE\nfiled: 2026-01-01\nstate: {state}\n---\n# Intake of #{n}\n"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> GitRepo:
    r = init_repo(tmp_path_factory.mktemp("pr_body") / "repo")
    r.commit(
        "Layout\n\nRow: GOV-CORE\n",
        {
            ".agents/config.yaml": CONFIG,
            ".agents/rows/GOV-CORE.yaml": row_yaml("GOV-CORE", issues="[1, 2, 3]"),
            ".agents/specs/GOV-CORE.md": SPEC,
            ".agents/issues/GOV-CORE/ISSUE-1.md": issue(1, "closed"),
            ".agents/issues/GOV-CORE/ISSUE-2.md": issue(2, "open"),
            ".agents/issues/GOV-CORE/ISSUE-3.md": issue(3, "open"),
        },
    )
    return r


def pr_body(repo: GitRepo, *args: str, stdin: str | None = None, env: dict[str, str] | None = None):
    return subprocess.run(
        [sys.executable, "-m", "checkers", "check", "pr-body", *args],
        cwd=repo.path,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin:/usr/local/bin", **GIT_ENV, **(env or {})},
    )


def fixture(name: str) -> str:
    return str(FIXTURES / f"{name}.md")


def test_a_good_body_passes(repo: GitRepo):
    proc = pr_body(repo, "--message-file", fixture("good"))
    assert (proc.returncode, proc.stdout) == (
        0,
        f"OK: {fixture('good')} carries the trailer contract and its 2 issue references hold\n",
    )


@pytest.mark.parametrize(
    ("name", "line"),
    [
        (
            "closes-open-issue",
            "{f}: PB001 closes-open-issue: closes #2, but its intake record .agents/issues/GOV-CORE/ISSUE-2.md is "
            "not closed (state: open)",
        ),
        (
            "ref-unknown-issue",
            "{f}: PB002 ref-unknown-issue: references #7, which has no intake record under .agents/issues/",
        ),
        (
            "issue-not-in-spec",
            "{f}: AR006 issue-ref-not-in-spec: message references #3, filed under GOV-CORE, but "
            ".agents/specs/GOV-CORE.md does not list #3",
        ),
        ("missing-row", "{f}: AR007 issue-ref-without-row: message references #2 but names no row (no Row: trailer)"),
    ],
)
def test_each_bad_body_fails_with_its_rule(repo: GitRepo, name: str, line: str):
    proc = pr_body(repo, "--message-file", fixture(name))
    assert proc.returncode == 1, proc.stdout
    assert proc.stdout.splitlines()[0] == line.format(f=fixture(name))


def test_a_placeholder_row_fails_the_filled_trailer_contract(repo: GitRepo):
    f = fixture("placeholder-row")
    proc = pr_body(repo, "--message-file", f)
    assert proc.returncode == 1, proc.stdout
    assert f"{f}: TR012 trailer-placeholder: Row: <ROW-ID> is the template placeholder" in proc.stdout.splitlines()


def test_missing_row_also_fails_the_trailer_contract(repo: GitRepo):
    f = fixture("missing-row")
    proc = pr_body(repo, "--message-file", f)
    assert [line for line in proc.stdout.splitlines() if line.startswith(f)] == [
        f"{f}: AR007 issue-ref-without-row: message references #2 but names no row (no Row: trailer)",
        f"{f}: TR001 trailer-missing: no Row trailer (need at least 1)",
    ]


def test_the_body_from_stdin_and_from_the_pull_request_event(repo: GitRepo, tmp_path: Path):
    body = Path(fixture("closes-open-issue")).read_text()
    proc = pr_body(repo, "--message-file", "-", stdin=body)
    assert proc.returncode == 1 and proc.stdout.startswith("<stdin>: PB001 closes-open-issue: closes #2")
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 12, "body": Path(fixture("good")).read_text()}}))
    proc = pr_body(repo, env={"GITHUB_EVENT_PATH": str(event)})
    assert (proc.returncode, proc.stdout) == (
        0,
        "OK: pull request #12 carries the trailer contract and its 2 issue references hold\n",
    )


def test_without_a_body_it_skips_and_says_why(repo: GitRepo):
    proc = pr_body(repo)
    assert (proc.returncode, proc.stdout) == (
        0,
        "SKIP: pr-body: no PR body: pass --message-file FILE (or -), or run on a pull_request event\n",
    )
