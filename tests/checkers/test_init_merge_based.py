"""`rowgate init` in a merge-based DCO project, then CI's steps: preflight on main, a pull request's range and
the pre-push hook, in a full and a shallow clone. The project is built here with real git: GitHub-style
merge commits (no sign-off), a Dependabot commit (its sign-off names another address than its author),
people who sign off. Green where the project's own convention holds; one finding and one hint per
unsigned human commit where it does not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import GIT_ENV, ROOT, GitRepo, init_repo

ADA = ("Ada Tester", "ada@example.com")
BOB = ("Bob Builder", "bob@example.com")
BOT = ("dependabot[bot]", "49699333+dependabot[bot]@users.noreply.github.com")
GITHUB = {"GIT_COMMITTER_NAME": "GitHub", "GIT_COMMITTER_EMAIL": "noreply@github.com"}


def signed(who: tuple[str, str]) -> str:
    return f"\n\nSigned-off-by: {who[0]} <{who[1]}>\n"


def rowgate(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin:/usr/local/bin", **GIT_ENV, **env}
    return subprocess.run(
        [sys.executable, "-m", "checkers", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=full,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def merge_pr(repo: GitRepo, number: int, branch: str) -> None:
    """What GitHub's merge button writes: a two-parent commit by the merger, committed by GitHub, unsigned."""
    repo.git("checkout", "-q", "main")
    repo.env.update(GITHUB)
    try:
        repo.git("merge", "-q", "--no-ff", "-m", f"Merge pull request #{number} from {branch}\n\nThe change", branch)
    finally:
        repo.env.update(GIT_COMMITTER_NAME=GIT_ENV["GIT_COMMITTER_NAME"], GIT_COMMITTER_EMAIL=ADA[1])


def dependabot(repo: GitRepo, n: int) -> None:
    repo.commit(
        f"Bump lib from 1.{n} to 1.{n + 1}\n\nSigned-off-by: dependabot[bot] <support@github.com>\n",
        {"go.mod": f"lib 1.{n + 1}\n"},
        author=BOT,
    )


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    """A bare remote whose main merges pull requests through the button: people's commits signed off,
    merges and one Dependabot commit not."""
    repo = init_repo(tmp_path / "build")
    repo.commit("Start" + signed(ADA), {"src/a.go": "package a\n", "go.mod": "lib 1.0\n"})
    for i in range(1, 5):
        repo.git("checkout", "-q", "-b", f"bob/f{i}")
        repo.commit(f"Feature {i}" + signed(BOB), {f"src/f{i}.go": f"package f{i}\n"}, author=BOB)
        merge_pr(repo, i, f"bob/f{i}")
    repo.git("checkout", "-q", "-b", "dependabot/lib")
    dependabot(repo, 0)
    merge_pr(repo, 5, "dependabot/lib")
    remote = tmp_path / "origin.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo.path), str(remote)], check=True, env=repo.env)
    return remote


def clone(remote: Path, path: Path, *flags: str) -> GitRepo:
    env = {**GIT_ENV, "PATH": "/usr/bin:/bin:/usr/local/bin"}
    subprocess.run(["git", "clone", "-q", *flags, f"file://{remote}", str(path)], check=True, env=env)
    repo = GitRepo(path)
    repo.git("config", "core.hooksPath", "/dev/null")
    return repo


def adopt(remote: Path, tmp_path: Path) -> GitRepo:
    """A maintainer's full clone: init, commit the config signed off, push it to main."""
    repo = clone(remote, tmp_path / "maint")
    proc = rowgate("init", cwd=repo.path)
    assert proc.returncode == 0, proc.stderr
    repo.commit("Add the rowgate config" + signed(ADA))
    repo.git("push", "-q", "origin", "main")
    return repo


def test_init_skips_button_merges_exempts_bots_and_counts_honestly(upstream: Path, tmp_path: Path):
    repo = clone(upstream, tmp_path / "full")
    proc = rowgate("init", "--dry-run", cwd=repo.path)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "\n  default_range: cutover\n" in text and "\n  merges: skip\n" in text
    assert "\n  exempt_authors: ['\\[bot\\] <'," in text
    out = rowgate("init", cwd=repo.path).stdout.splitlines()
    assert "  presets [dco]: 5 of 5 commits by people signed off by their author" in out
    assert "  merges: skip: 5 of the last 6 first-parent commits are merges, 5 without the presets' trailers" in out
    assert (
        "  exempt_authors: commits by known bots (Dependabot, Renovate, github-actions, any *[bot]) are not "
        "judged (1 in the history read); a config exemption, not .mailmap lines"
    ) in out
    head = repo.head()
    assert f"  cutover: HEAD when init ran ({head[:12]}); it and its 10 ancestors are not judged by the presets" in out
    assert "  (0 of the 5 commits by people read break them; merges and bots not counted)" in out
    assert not any("shallow" in line for line in out)
    assert out[-2] == (  # the last line is "wrote ..."
        "note: the hook of a disabled check passes without running (pre-commit prints Passed): leave "
        "rowgate-evidence, rowgate-env-doc, rowgate-gemv-invocation, rowgate-gencode out of .pre-commit-config.yaml"
    )


def test_ci_on_main_a_pull_request_and_the_pre_push_hook(upstream: Path, tmp_path: Path):
    adopt(upstream, tmp_path)
    ci = clone(upstream, tmp_path / "ci")  # a fresh CI checkout of main, up to date
    proc = rowgate("preflight", cwd=ci.path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "commit-trailers" in proc.stdout and proc.stdout.splitlines()[-1].startswith("All gates green")
    # the README's first command on an up-to-date main: an empty range, a pass that says what it judged
    proc = rowgate("check", "commit-trailers", "--range", "origin/main..HEAD", cwd=ci.path)
    assert (proc.returncode, proc.stdout) == (
        0,
        f"OK: origin/main is the base: nothing new since {ci.head()[:12]} (0 commits to judge)\n",
    )

    # a pull request: a person's signed commit, a Dependabot commit, main merged in by the button
    ci.git("checkout", "-q", "-b", "feature")
    ci.commit("Carol's change" + signed(BOB), {"src/c.go": "package c\n"}, author=BOB)
    dependabot(ci, 1)
    proc = rowgate("check", "commit-trailers", "--range", "origin/main..HEAD", cwd=ci.path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.endswith("carry the trailer contract (dco); 1 by exempt authors (bots) skipped\n")
    # a Dependabot pull request alone: nothing under the contract, a pass that says why
    proc = rowgate("check", "commit-trailers", "--range", "HEAD~1..HEAD", cwd=ci.path)
    assert proc.returncode == 0 and "is under the contract: 1 by exempt authors (bots) skipped" in proc.stdout

    # the seeded violation: two unsigned commits by a person, one finding each and the fix once
    first = ci.commit("Unsigned one\n", {"src/d.go": "package d\n"}, author=BOB)
    second = ci.commit("Unsigned two\n", {"src/e.go": "package e\n"}, author=BOB)
    for args in (("check", "commit-trailers", "--range", "origin/main..HEAD"), ("preflight",)):
        proc = rowgate(*args, cwd=ci.path)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        lines = proc.stdout.splitlines()
        findings = [line for line in lines if line.startswith("TR001 ")]
        assert findings == [
            f"TR001 trailer-missing: {first[:12]}: no Signed-off-by trailer (need at least 1)",
            f"TR001 trailer-missing: {second[:12]}: no Signed-off-by trailer (need at least 1)",
        ]
        assert len([line for line in lines if line.lstrip().startswith("fix")]) == 1

    # the pre-push hook as pre-commit runs it for a new branch: the whole branch against origin's main
    hook = {
        "PRE_COMMIT_FROM_REF": "0" * 40,
        "PRE_COMMIT_TO_REF": ci.head(),
        "PRE_COMMIT_REMOTE_NAME": "origin",
        "PRE_COMMIT_REMOTE_BRANCH": "refs/heads/feature",
        "PRE_COMMIT_LOCAL_BRANCH": "refs/heads/feature",
    }
    proc = rowgate("check", "commit-trailers", cwd=ci.path, **hook)
    assert proc.returncode == 1 and proc.stdout.count("TR001 trailer-missing") == 2
    assert len([line for line in proc.stdout.splitlines() if line.lstrip().startswith("fix")]) == 1
    ci.git("reset", "-q", "--hard", "HEAD~2")
    hook["PRE_COMMIT_TO_REF"] = ci.head()
    proc = rowgate("check", "commit-trailers", cwd=ci.path, **hook)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_shallow_clone_is_named_by_init_and_main_stays_green(upstream: Path, tmp_path: Path):
    shallow = clone(upstream, tmp_path / "shallow", "--depth", "3")
    out = rowgate("init", "--dry-run", cwd=shallow.path)
    assert out.returncode == 0
    said = rowgate("init", cwd=shallow.path).stdout
    fetched = shallow.git("rev-list", "--count", "HEAD").strip()
    assert said.splitlines()[0] == (
        f"note: the clone is shallow ({fetched} commits fetched): the counts below cover only those; "
        "`git fetch --unshallow` gives the whole history"
    )
    adopt(upstream, tmp_path)
    ci = clone(upstream, tmp_path / "ci", "--depth", "2")  # CI's shallow checkout: the config commit and its parent
    proc = rowgate("preflight", cwd=ci.path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
