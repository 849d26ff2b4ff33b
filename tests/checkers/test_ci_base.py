"""`rowgate ci base`: each rule of the walk chooses the base in its case, on a real repository."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import GIT_ENV, ROOT, init_repo


class Repo:
    """main: A - B - C - D; branch `feature` from D: E (checked out); `side` from B: S."""

    def __init__(self, tmp: Path):
        self.git = init_repo(tmp / "repo")
        g = self.git
        self.a, self.b = g.commit("A\n", {"a": "a"}), g.commit("B\n", {"b": "b"})
        g.git("checkout", "-q", "-b", "side")
        self.s = g.commit("S\n", {"s": "s"})
        g.git("checkout", "-q", "main")
        self.c, self.d = g.commit("C\n", {"c": "c"}), g.commit("D\n", {"d": "d"})
        g.git("checkout", "-q", "-b", "feature")
        self.e = g.commit("E\n", {"e": "e"})
        self.tmp = tmp

    def event(self, **data: object) -> Path:
        path = self.tmp / "event.json"
        path.write_text(json.dumps(data))
        return path


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return Repo(tmp_path)


def ci_base(repo: Repo, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, list[str]]:
    proc = subprocess.run(
        [sys.executable, "-m", "checkers", "ci", "base", *args],
        cwd=repo.git.path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin:/usr/local/bin", **GIT_ENV, **(env or {})},
    )
    return proc.returncode, proc.stdout, proc.stderr.splitlines()


def test_the_last_green_ref_wins(repo: Repo):
    repo.git.git("update-ref", "refs/rowgate/last-green", repo.c)
    code, out, err = ci_base(repo, "--before", repo.b)
    assert (code, out) == (0, repo.c + "\n")
    assert err == [f"rowgate: ci base {repo.c[:12]}: last-green (ref refs/rowgate/last-green)"]


def test_a_last_green_that_is_not_an_ancestor_is_passed_over_for_the_push_before(repo: Repo):
    repo.git.git("update-ref", "refs/rowgate/last-green", repo.s)
    code, out, err = ci_base(repo, "--event-path", str(repo.event(before=repo.b)))
    assert (code, out) == (0, repo.b + "\n")
    assert err == [
        f"rowgate: ci base: last-green ref refs/rowgate/last-green: {repo.s[:12]} is not an ancestor of head "
        f"{repo.e[:12]}",
        f"rowgate: ci base {repo.b[:12]}: push-before (event {repo.tmp / 'event.json'})",
    ]


def test_the_last_green_file(repo: Repo):
    green = repo.tmp / "green.txt"
    green.write_text(repo.c + "\n")
    code, out, err = ci_base(repo, "--green-file", str(green))
    assert (code, out, err[-1]) == (0, repo.c + "\n", f"rowgate: ci base {repo.c[:12]}: last-green (file {green})")


def test_the_event_path_comes_from_the_environment(repo: Repo):
    event = repo.event(before=repo.c)
    code, out, err = ci_base(repo, env={"GITHUB_EVENT_PATH": str(event)})
    assert (code, out, err[-1]) == (0, repo.c + "\n", f"rowgate: ci base {repo.c[:12]}: push-before (event {event})")


def test_a_new_branch_push_falls_back_to_the_merge_base_with_the_default_branch(repo: Repo):
    code, out, err = ci_base(repo, "--before", "0" * 40, "--default-branch", "main")
    assert (code, out) == (0, repo.d + "\n")
    assert err == [
        "rowgate: ci base: last-green ref refs/rowgate/last-green: none",
        "rowgate: ci base: push-before (--before): none",
        f"rowgate: ci base {repo.d[:12]}: merge-base (with main (--default-branch))",
    ]


def test_a_pull_request_takes_the_merge_base_with_its_target(repo: Repo):
    """Not the synchronize event's `before` (the previous head of the pull request): its whole range."""
    repo.git.git("update-ref", "refs/remotes/origin/main", repo.c)
    event = repo.event(before=repo.d, pull_request={"number": 1})
    code, out, err = ci_base(repo, env={"GITHUB_BASE_REF": "main", "GITHUB_EVENT_PATH": str(event)})
    assert (code, out) == (0, repo.c + "\n")
    assert err[-1] == (
        f"rowgate: ci base {repo.c[:12]}: merge-base (with origin/main (the pull request's target, $GITHUB_BASE_REF))"
    )


def test_never_older_than_the_floor(repo: Repo):
    code, out, err = ci_base(repo, "--before", repo.a, "--floor", repo.c)
    assert (code, out) == (0, repo.c + "\n")
    assert err[-1] == (
        f"rowgate: ci base {repo.c[:12]}: floor (push-before chose {repo.a[:12]}, older than the floor; "
        f"the reviewed enforcement floor {repo.c})"
    )


def test_the_floor_from_the_config_leaves_a_newer_base_alone(repo: Repo):
    repo.git.commit("Config\n", {".agents/config.yaml": f"version: 1\nci:\n  floor: {repo.b}\n"})
    code, out, _ = ci_base(repo, "--before", repo.d, "--format", "json")
    doc = json.loads(out)
    assert (code, doc["base"], doc["rule"], doc["floor"]) == (0, repo.d, "push-before", repo.b)


def test_no_rule_applies(repo: Repo):
    code, out, err = ci_base(repo)
    assert (code, out) == (3, "")
    assert err == [
        "rowgate: no CI base: no last green commit, no push `before`, no default branch",
        "    fix: pass --default-branch REF (or fetch the default branch), or --before SHA",
    ]
