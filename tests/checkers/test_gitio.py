"""Git access on real temporary repositories (the range resolver is tested in test_context.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from checkers.gitio import Git, GitError, discover_repo
from tests.conftest import GitRepo, init_repo


def test_commits_reads_a_range_in_one_process_oldest_first(git_repo: GitRepo):
    git_repo.commit("root")
    a = git_repo.commit("A title\n\nbody with \x1f unit separator\n\nRow: GOV-CORE\n")
    b = git_repo.commit("B title")
    commits = Git(git_repo.path).commits(f"{a}~1..HEAD")
    assert [c.sha for c in commits] == [a, b]
    assert commits[0].message == "A title\n\nbody with \x1f unit separator\n\nRow: GOV-CORE\n"
    assert commits[0].author_email == "ada@example.com" and not commits[0].is_merge


def test_user_git_config_does_not_leak_in(git_repo: GitRepo, tmp_path: Path, monkeypatch):
    cfg = tmp_path / "evil.gitconfig"
    cfg.write_text("[log]\n\tshowSignature = true\n[core]\n\tabbrev = 4\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(cfg))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'trailer.separators'='#'")
    sha = git_repo.commit("one")
    assert Git(git_repo.path).commits("HEAD")[0].sha == sha
    assert Git(git_repo.path).text("config", "--get", "core.abbrev", ok_codes=(0, 1)) == ""


# --- range_commits: one git log that also finds the merge base ---------------------------------------


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> tuple[GitRepo, dict[str, str]]:
    """main R-M1-M2; feature from R with M1 merged in (F1, F2 merge, F3); side S1 from R; a criss-cross
    pair X2/Y2 (each merges the other's first commit); an unrelated root O1."""
    repo = init_repo(tmp_path_factory.mktemp("shapes") / "repo")
    c = {"R": repo.commit("root")}
    c["M1"] = repo.commit("main 1")
    c["M2"] = repo.commit("main 2")
    for branch, names in (("feature", ["F1"]), ("side", ["S1"]), ("x", ["X1"]), ("y", ["Y1"])):
        repo.git("checkout", "-q", "-b", branch, c["R"])
        for name in names:
            c[name] = repo.commit(f"{branch} {name}")
    repo.git("checkout", "-q", "feature")
    repo.git("merge", "-q", "--no-ff", "-m", "Merge main 1", c["M1"])
    c["F2"] = repo.head()
    c["F3"] = repo.commit("feature F3")
    repo.git("checkout", "-q", "x")
    repo.git("merge", "-q", "--no-ff", "-m", "Merge Y1", c["Y1"])
    c["X2"] = repo.head()
    repo.git("checkout", "-q", "y")
    repo.git("merge", "-q", "--no-ff", "-m", "Merge X1", c["X1"])
    c["Y2"] = repo.head()
    repo.git("checkout", "-q", "--orphan", "other")
    c["O1"] = repo.commit("unrelated root")
    return repo, c


@pytest.mark.parametrize(
    "base,head,logs,merge_bases",
    [
        ("R", "M2", 1, 0),  # base is an ancestor: one boundary commit, the base
        ("M2", "S1", 1, 0),  # a fork: one boundary commit, the fork point
        ("M2", "F3", 1, 1),  # main merged into the branch: two boundary commits, one merge base
        ("X2", "Y2", 2, 2),  # criss-cross: two merge bases, so git's pick and a second log, as before
        ("M2", "R", 1, 0),  # head behind base: an empty range at head
        ("M2", "M2", 1, 0),
    ],
)
def test_range_commits_equals_merge_base_then_log(
    shapes, monkeypatch, base: str, head: str, logs: int, merge_bases: int
):
    repo, c = shapes
    git = Git(repo.path)
    expected_base = git.merge_base(c[base], c[head])
    expected = git.commits(f"{expected_base}..{c[head]}", mailmap=True)
    calls: list[str] = []
    run, records = Git.run, Git.records
    monkeypatch.setattr(Git, "run", lambda self, *args, **kw: calls.append(args[0]) or run(self, *args, **kw))
    monkeypatch.setattr(Git, "records", lambda self, *args, **kw: calls.append(args[0]) or records(self, *args, **kw))
    assert git.range_commits(c[base], c[head], mailmap=True) == (expected_base, expected)
    assert (calls.count("log"), calls.count("merge-base")) == (logs, merge_bases)
    if base == "X2":
        assert len(git.text("merge-base", "--all", c[base], c[head]).split()) == 2  # really criss-cross


def test_range_commits_of_unrelated_histories_is_an_error(shapes):
    repo, c = shapes
    with pytest.raises(GitError, match="have unrelated histories"):
        Git(repo.path).range_commits(c["M2"], c["O1"])


def test_range_commits_reads_only_the_fields_asked_for(shapes):
    repo, c = shapes
    git = Git(repo.path)
    full = git.range_commits(c["M2"], c["F3"])
    lean = git.range_commits(c["M2"], c["F3"], parents=False, authors=False)
    assert lean[0] == full[0] == c["M1"]
    assert [(x.sha, x.message) for x in lean[1]] == [(x.sha, x.message) for x in full[1]]
    assert {(x.parents, x.author_name, x.author_email) for x in lean[1]} == {(None, None, None)}
    assert [len(x.parents) for x in full[1]] == [1, 2, 1] and full[1][0].author_email == "ada@example.com"


def test_a_commit_read_without_its_parents_says_so_instead_of_guessing(git_repo: GitRepo):
    """range_commits(parents=False) leaves parents unread: asking whether such a commit is a merge is a
    caller's bug, reported as one (it was a TypeError from len(None))."""
    root = git_repo.commit("root")
    git_repo.commit("child")
    _, [child] = Git(git_repo.path).range_commits(root, "HEAD", parents=False)
    with pytest.raises(ValueError, match=rf"^commit {child.short} was read without its parents"):
        child.is_merge  # noqa: B018
    _, [read] = Git(git_repo.path).range_commits(root, "HEAD")
    assert read.parent_shas == (root,) and not read.is_merge


def test_range_read_reads_each_message_once_and_in_order_also_after_a_second_log(shapes):
    repo, c = shapes
    git = Git(repo.path)
    for base, head in (("M2", "F3"), ("X2", "Y2")):  # the second: criss-cross, read again from git's pick
        merge_base, commits = git.range_commits(c[base], c[head])
        seen: list[str] = []
        again = git.range_read(c[base], c[head], lambda m, seen=seen: seen.append(m) or len(m))
        assert again == (merge_base, commits, [len(x.message) for x in commits])
        assert seen[-len(commits) :] == [x.message for x in commits]


# --- records: a -z log read as git writes it ---------------------------------------------------------


def test_records_are_the_nul_ended_records_of_the_output_whatever_the_chunk_size(git_repo: GitRepo):
    git_repo.commit("root")
    git_repo.commit("big\n\n" + "x" * 70_000 + "\n")  # one record over several reads of a pipe
    git_repo.commit("caf\u00e9")
    git = Git(git_repo.path)
    *whole, end = git.text("log", "-z", "--format=%H%x1f%B").split("\0")
    assert end == "" and len(whole) == 3 and whole[0].endswith("caf\u00e9\n")
    for chunk in (1, 7, 1 << 16):
        assert list(git.records("log", "-z", "--format=%H%x1f%B", chunk=chunk)) == whole
    assert list(git.records("rev-parse", "HEAD")) == [git.text("rev-parse", "HEAD")]  # no NUL: one record


def test_records_raise_what_git_said_after_the_records_read(git_repo: GitRepo):
    git_repo.commit("root")
    reader = Git(git_repo.path).records("log", "-z", "--format=%H", "HEAD", "no-such-rev", "--")
    with pytest.raises(GitError, match=r"^git log -z --format=%H HEAD no-such-rev -- failed: fatal: bad revision"):
        next(reader)


def test_records_time_out_as_run_does(git_repo: GitRepo, tmp_path: Path, monkeypatch):
    stuck = tmp_path / "bin" / "git"  # a git that writes one record, then hangs
    stuck.parent.mkdir()
    stuck.write_text("#!/bin/sh\nprintf 'one\\0'\nexec sleep 30\n")
    stuck.chmod(0o755)
    monkeypatch.setenv("PATH", f"{stuck.parent}:{os.environ['PATH']}")
    reader = Git(git_repo.path, timeout_s=0.5).records("log", "-z")
    assert next(reader) == "one"
    with pytest.raises(GitError, match=r"^git log -z timed out after 0s"):
        next(reader)


def test_a_reader_that_stops_early_stops_git(git_repo: GitRepo, monkeypatch):
    import subprocess

    for i in range(3):
        git_repo.commit(f"c{i}")
    procs: list[subprocess.Popen[bytes]] = []
    popen = subprocess.Popen

    def spy(*args, **kw):
        procs.append(popen(*args, **kw))
        return procs[-1]

    monkeypatch.setattr(subprocess, "Popen", spy)
    reader = Git(git_repo.path).records("log", "-z", "--format=%H", chunk=1)
    assert len(next(reader)) == 40
    reader.close()
    assert procs[0].returncode is not None and procs[0].stdout.closed


# --- the shallow and grafts files -------------------------------------------------------------------


def test_graft_files_of_a_discovered_repository_are_gits_own_without_a_git_process(
    git_repo: GitRepo, tmp_path: Path, monkeypatch
):
    """In a shallow clone and in a linked work tree of it (whose `commondir` names the shared git
    directory), the files are the ones `git rev-parse --git-path` names, and the shallow cut is found."""
    for i in range(3):
        git_repo.commit(f"c{i}")
    clone, linked = tmp_path / "clone", tmp_path / "linked"
    git_repo.git("clone", "-q", "--depth", "2", f"file://{git_repo.path}", str(clone))
    GitRepo(clone).git("worktree", "add", "-q", "--detach", str(linked))
    calls: list[tuple[str, ...]] = []
    run = Git.run
    for start in (clone, linked):
        root, _ = discover_repo(start)
        git = Git(root)
        theirs = git.text("rev-parse", "--git-path", "shallow", "--git-path", "info/grafts").split()
        calls.clear()
        monkeypatch.setattr(Git, "run", lambda self, *a, **kw: calls.append(a) or run(self, *a, **kw))
        ours = git.graft_files()
        assert calls == [] and [p.resolve() for p in ours] == [Path(root, t).resolve() for t in theirs]
        with pytest.raises(GitError, match="crosses the shallow boundary"):
            git.require_complete_history("HEAD")
        monkeypatch.undo()


def test_ancestors_among_answers_as_is_ancestor_does_for_each(git_repo: GitRepo):
    root = git_repo.commit("root")
    a = git_repo.commit("A")
    git_repo.git("checkout", "-q", "-b", "side")
    side = git_repo.commit("side")
    git_repo.git("checkout", "-q", "main")
    b = git_repo.commit("B")
    git = Git(git_repo.path)
    commits = [root, a, side, b]
    for head in commits:
        assert git.ancestors_among(commits, head) == {c for c in commits if git.is_ancestor(c, head)}, head
    assert git.ancestors_among(commits, b) == {root, a, b}
    assert git.ancestors_among([], b) == set()


def test_frozen_refs_are_asked_of_git_once(git_repo: GitRepo, monkeypatch):
    """After freeze_refs (the preflight's read-only run) each ref or ancestry question runs git once; before
    it, every call asks git again and sees a new commit."""
    first = git_repo.commit("one")
    git = Git(git_repo.path)
    calls: list[tuple[str, ...]] = []
    run = Git.run

    def counting(self: Git, *args: str, **kw: object):
        calls.append(args)
        return run(self, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Git, "run", counting)
    assert git.resolve("HEAD") == first
    second = git_repo.commit("two")
    assert git.resolve("HEAD") == second and len(calls) == 2
    git.freeze_refs()
    answers = [git.resolve("HEAD"), git.current_branch(), git.merge_base(first, second), git.is_ancestor(first, second)]
    assert answers == [second, "main", first, True]
    asked = len(calls)
    git_repo.commit("three")
    again = [git.resolve("HEAD"), git.current_branch(), git.merge_base(first, second), git.is_ancestor(first, second)]
    assert again == answers and len(calls) == asked


def test_changed_paths_of_some_commits_equals_the_whole_log_for_them(git_repo: GitRepo):
    git_repo.commit("root", {"a.txt": "a\n"})
    one = git_repo.commit("one", {"b.txt": "b\n", "dir/new\nline.txt": "c\n"})
    two = git_repo.commit("two", {"a.txt": "a2\n"})
    git = Git(git_repo.path)
    whole = git.changed_paths("HEAD")
    assert git.changed_paths_of([two, one]) == {one: whole[one], two: whole[two]}
    assert whole[one] == ["b.txt", "dir/new\nline.txt"] and git.changed_paths_of([]) == {}
