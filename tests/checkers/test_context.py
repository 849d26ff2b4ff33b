"""The one range resolver, Context.range(), on real temporary repositories: precedence, the merge base,
errors that name the fix, and the pre-push hooks judging the same range in every range check."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from checkers.config import load_config
from checkers.context import ZERO_SHA, Context, NoRange
from checkers.gitio import EMPTY_TREE, GitError
from tests.conftest import MINIMAL_CONFIG, ROOT, GitRepo, init_repo, row_yaml


def _clone(src: GitRepo, dest: Path, *args: str) -> GitRepo:
    subprocess.run(
        ["git", "clone", "-q", *args, f"file://{src.path}", str(dest)],
        check=True,
        env=src.env,
        capture_output=True,
        timeout=60,
    )
    return GitRepo(dest)


def _ctx(repo: GitRepo, env: dict[str, str] | None = None) -> tuple[Context, io.StringIO]:
    notes = io.StringIO()
    return Context(root=repo.path, config=load_config(repo.path), env=env or {}, notes=notes), notes


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    r = init_repo(tmp_path / "repo")
    r.commit("config", {".agents/config.yaml": MINIMAL_CONFIG})
    return r


def test_range_starts_at_merge_base_when_base_moved_and_is_printed_once(repo: GitRepo):
    root = repo.head()
    repo.git("checkout", "-q", "-b", "feature")
    f1 = repo.commit("feature work")
    repo.git("checkout", "-q", "main")
    moved = repo.commit("main moved on")
    repo.git("checkout", "-q", "feature")
    ctx, notes = _ctx(repo)
    rng = ctx.range("main")
    assert (rng.ref, rng.source, rng.base, rng.merge_base, rng.head) == ("main", "--base", moved, root, f1)
    assert [c.sha for c in rng.commits()] == [f1]
    assert ctx.range("main") is rng
    assert notes.getvalue() == f"rowgate: base main (--base) = {moved[:12]}; merge base {root[:12]}; head {f1[:12]}\n"


def test_commits_find_the_merge_base_in_the_same_log(repo: GitRepo, monkeypatch: pytest.MonkeyPatch):
    root = repo.head()
    repo.git("checkout", "-q", "-b", "feature")
    f1 = repo.commit("feature work")
    ctx, _ = _ctx(repo)
    calls: list[str] = []
    run, records = ctx.git.run, ctx.git.records
    monkeypatch.setattr(ctx.git, "run", lambda *a, **kw: calls.append(a[0]) or run(*a, **kw))
    monkeypatch.setattr(ctx.git, "records", lambda *a, **kw: calls.append(a[0]) or records(*a, **kw))
    rng = ctx.range("main")
    assert [c.sha for c in rng.commits()] == [f1] and rng.merge_base == root
    assert "merge-base" not in calls and calls.count("log") == 1


def test_precedence_flag_then_env_then_pre_push_then_config_then_upstream(tmp_path: Path):
    up = init_repo(tmp_path / "up")
    up.commit("one", {".agents/config.yaml": MINIMAL_CONFIG})
    clone = _clone(up, tmp_path / "clone")
    one = clone.head()
    clone.git("branch", "other")
    two = clone.commit("two")

    def source(base: str | None = None, env: dict[str, str] | None = None, config: str = "") -> tuple[str, str]:
        clone.write({".agents/config.yaml": MINIMAL_CONFIG + config})
        rng = _ctx(clone, env)[0].range(base)
        return rng.ref, rng.source

    env = {"ROWGATE_BASE": "main", "PRE_COMMIT_FROM_REF": one, "PRE_COMMIT_TO_REF": two}
    assert source("other", env, "base:\n  ref: main\n") == ("other", "--base")
    assert source(None, env, "base:\n  ref: main\n") == ("main", "$ROWGATE_BASE")
    del env["ROWGATE_BASE"]
    # a push is judged whole: from the merge base with the remote's default branch, not the remote's old tip
    assert source(None, env, "base:\n  ref: main\n") == ("origin/main", "pre-push: the default branch of the upstream")
    clone.git("remote", "set-url", "origin", str(tmp_path / "gone"))
    clone.git("update-ref", "-d", "refs/remotes/origin/main")
    clone.git("update-ref", "-d", "refs/remotes/origin/HEAD", check=False)
    assert source(None, env, "base:\n  ref: main\n") == (one, "pre-push PRE_COMMIT_FROM_REF")  # no default branch
    assert source(None, {}, "base:\n  ref: other\n") == ("other", "config base.ref")
    clone.git("update-ref", "refs/remotes/origin/main", one)
    assert source(None, {}) == ("origin/main", "detected upstream")
    assert source(None, {"RB": "other"}, "base:\n  env: RB\n") == ("other", "$RB")


def test_head_is_the_flag_then_the_pushed_ref_then_head(repo: GitRepo):
    one = repo.head()
    two = repo.commit("two")
    ctx, _ = _ctx(repo, {"PRE_COMMIT_FROM_REF": one, "PRE_COMMIT_TO_REF": one})
    assert ctx.range().head == one
    assert ctx.range(head=two).head == two
    assert _ctx(repo)[0].range(one).head == two


def test_a_check_since_a_start_judges_from_it_outside_a_push(repo: GitRepo):
    start = repo.head()
    repo.commit("two")
    rng = _ctx(repo)[0].range(since=start, since_source="config cutover")
    assert (rng.ref, rng.source, rng.merge_base) == (start, "config cutover", start)
    with pytest.raises(NoRange) as exc:
        _ctx(repo)[0].range(since=None, since_source="config cutover")
    assert (str(exc.value), exc.value.hint) == (
        "no range: the config has no cutover and no --base was given",
        "set cutover: in .agents/config.yaml or pass --base REF",
    )


def test_fork_prefers_upstream_remote_over_origin(tmp_path: Path):
    upstream = init_repo(tmp_path / "upstream")
    up_head = upstream.commit("upstream main", {".agents/config.yaml": MINIMAL_CONFIG})
    fork = _clone(upstream, tmp_path / "fork")
    fork.commit("fork-only commit on the fork's main")
    fork_remote = tmp_path / "fork-remote.git"
    subprocess.run(
        ["git", "clone", "-q", "--bare", str(fork.path), str(fork_remote)],
        check=True,
        env=fork.env,
        capture_output=True,
    )
    work = _clone(GitRepo(fork_remote), tmp_path / "work")
    work.git("remote", "add", "upstream", f"file://{upstream.path}")
    work.git("fetch", "-q", "upstream")
    rng = _ctx(work)[0].range()
    assert rng.ref.startswith("upstream/") and rng.base == up_head


def test_missing_ref_is_an_error_with_a_fix(repo: GitRepo):
    with pytest.raises(GitError) as exc:
        _ctx(repo)[0].range("origin/nope")
    assert str(exc.value) == "base 'origin/nope' does not resolve to a commit"
    assert "fetch" in exc.value.hint


def test_unrelated_histories_are_an_error(repo: GitRepo):
    repo.git("checkout", "-q", "--orphan", "other")
    repo.commit("unrelated root", {".agents/config.yaml": MINIMAL_CONFIG})
    with pytest.raises(GitError) as exc:
        _ = _ctx(repo)[0].range("main").merge_base
    assert str(exc.value).endswith("have unrelated histories (no merge base)")


def test_shallow_clone_is_an_error_not_a_shrunken_range(tmp_path: Path):
    up = init_repo(tmp_path / "up")
    up.commit("a", {".agents/config.yaml": MINIMAL_CONFIG})
    up.git("checkout", "-q", "-b", "side")
    up.commit("side 1")
    up.git("checkout", "-q", "main")
    for i in range(3):
        up.commit(f"main {i}")
    shallow = _clone(up, tmp_path / "shallow", "--depth", "1", "--no-single-branch")
    with pytest.raises(GitError) as exc:
        _ = _ctx(shallow)[0].range("origin/side").merge_base
    assert "shallow clone" in str(exc.value) and "--unshallow" in exc.value.hint


def test_no_remote_at_all_judges_every_commit_and_a_remote_without_upstream_is_an_error(repo: GitRepo):
    rng = _ctx(repo)[0].range()
    assert (rng.source, rng.merge_base, rng.spec) == ("no remote: no commit is published yet", EMPTY_TREE, repo.head())
    assert [c.sha for c in rng.commits()] == repo.git("rev-list", "--reverse", "HEAD").split()
    repo.git("remote", "add", "origin", "file:///nowhere")  # never fetched: no upstream to measure against
    with pytest.raises(GitError, match="no base given and no upstream detected"):
        _ctx(repo)[0].range()


# --- the pre-push hooks: every range check judges what is pushed, against the same base ---------------


@pytest.fixture
def pushed(tmp_path: Path) -> tuple[GitRepo, str, str]:
    """A clone whose main is on its remote, with a cutover long before, and a new branch of two commits
    (one not naming a row) that the remote does not have yet: (clone, main's tip, the branch's tip)."""
    up = init_repo(tmp_path / "up")
    up.commit(
        "Layout",
        {
            ".agents/config.yaml": MINIMAL_CONFIG,
            ".agents/rows/GOV-CORE.yaml": row_yaml("GOV-CORE"),
            ".agents/specs/GOV-CORE.md": "# GOV-CORE\n",
        },
    )
    cutover = up.head()
    config = (
        MINIMAL_CONFIG + f"cutover: {cutover}\npr_size:\n  classes:\n    - {{name: all, paths: ['**'], budget: null}}\n"
    )
    up.commit("Configure\n\nRow: GOV-CORE\n", {".agents/config.yaml": config})
    up.commit("Landed before the gate\n")  # names no row, on main: only a range from the cutover sees it
    clone = _clone(up, tmp_path / "clone")
    main = clone.head()
    clone.git("checkout", "-q", "-b", "feature")
    clone.commit("Feature\n\nRow: GOV-CORE\n", {"a.txt": "a\n"})
    feature = clone.commit("More feature\n\nRow: GOV-CORE\n", {"b.txt": "b\n"})
    clone.git("checkout", "-q", "main")  # a push names its refs: HEAD need not be the pushed branch
    return clone, main, feature


def _hook(repo: GitRepo, check: str, env: dict[str, str]) -> tuple[str, list[str]]:
    """The check as its pre-push hook runs it (`rowgate check ID`): its verdict and the range it printed."""
    proc = subprocess.run(
        [sys.executable, "-m", "checkers", "check", check],
        cwd=repo.path,
        capture_output=True,
        text=True,
        env={**repo.env, "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin:/usr/local/bin", **env},
        timeout=120,
    )
    return proc.stdout.splitlines()[-1], [line for line in proc.stderr.splitlines() if line.startswith("rowgate: base")]


@pytest.mark.parametrize("form", ["zero-from-ref", "branch-names-only", "first-new-parent"])
def test_role_discipline_and_pr_size_judge_the_same_range_on_a_push_of_a_new_branch(pushed, form: str):
    repo, main, feature = pushed
    names = {
        "PRE_COMMIT_LOCAL_BRANCH": "refs/heads/feature",
        "PRE_COMMIT_REMOTE_BRANCH": "refs/heads/feature",
        "PRE_COMMIT_REMOTE_NAME": "origin",
        "PRE_COMMIT_REMOTE_URL": "file:///up",
    }
    env = {
        "zero-from-ref": {**names, "PRE_COMMIT_FROM_REF": ZERO_SHA, "PRE_COMMIT_TO_REF": feature},
        "branch-names-only": names,  # pre-commit's form when it cannot name a from-ref
        "first-new-parent": {**names, "PRE_COMMIT_FROM_REF": main, "PRE_COMMIT_TO_REF": feature},
    }[form]
    role, role_range = _hook(repo, "role-discipline", env)
    size, size_range = _hook(repo, "pr-size", env)
    ref, source = "origin/main", "pre-push: the default branch of origin"  # the branch is judged whole
    expected = [f"rowgate: base {ref} ({source}) = {main[:12]}; merge base {main[:12]}; head {feature[:12]}"]
    assert role_range == size_range == expected
    assert role == "OK: 2 commits (0 merges) reach main through a row (trailer mode)"
    assert size == "OK: every path class is within its review budget (2 files, 2 lines)"


def test_outside_a_push_role_discipline_judges_the_history_since_the_cutover(pushed):
    repo, main, _ = pushed
    verdict, _ = _hook(repo, "role-discipline", {})
    assert verdict.startswith("FAIL: role-discipline: 1 finding in 2 commits")


def test_files_are_the_tracked_paths_that_match_an_include_and_no_exclude(repo: GitRepo):
    repo.commit("sources", {"a/x.py": "", "a/b/y.py": "", "k.cu": "", "a/b/z.cu": ""})
    repo.write({"untracked.py": ""})
    ctx, _ = _ctx(repo)
    assert ctx.files(["**/*.py"]) == ["a/b/y.py", "a/x.py"]
    assert ctx.files(["**/*.py", "*.cu"], exclude=["a/b/**"]) == ["a/x.py", "k.cu"]
    assert ctx.files([]) == []
    assert ctx.files() == [".agents/config.yaml", "a/b/y.py", "a/b/z.cu", "a/x.py", "k.cu"]
