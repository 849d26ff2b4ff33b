"""rowgate in a repository that never heard of it: no config, then a config that only says what differs
(`--config`, $ROWGATE_CONFIG, [tool.rowgate]), per-check `enabled`, rule ignores; all through the CLI in
real temporary repositories."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import GIT_ENV, ROOT, GitRepo, init_repo

SIGNED = "\n\nSigned-off-by: Ada Tester <ada@example.com>\n"


def rowgate(*args: str, cwd: Path, unset: tuple[str, ...] = (), **env: str) -> subprocess.CompletedProcess[str]:
    return python("-m", "checkers", *args, cwd=cwd, unset=unset, **env)


def python(*args: str, cwd: Path, unset: tuple[str, ...] = (), **env: str) -> subprocess.CompletedProcess[str]:
    full = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin:/usr/local/bin", **GIT_ENV, **env}
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={k: v for k, v in full.items() if k not in unset},
        timeout=120,
        check=False,
    )


@pytest.fixture
def signed(tmp_path: Path) -> GitRepo:
    """A plain repository with three signed-off commits and no rowgate config."""
    repo = init_repo(tmp_path / "plain")
    for i in range(3):
        repo.commit(f"Change {i}{SIGNED}", {f"src/m{i}.py": f"x = {i}\n", "README.md": f"v{i}\n"})
    return repo


def test_zero_config_dco_range_passes_and_an_unsigned_commit_fails(signed: GitRepo):
    proc = rowgate("check", "commit-trailers", "--preset", "dco", "--range", "HEAD~2..HEAD", cwd=signed.path)
    base, head = signed.head("HEAD~2")[:12], signed.head()[:12]
    ok = f"OK: 2 commits in {base}..{head} carry the trailer contract (dco)\n"
    assert (proc.returncode, proc.stdout) == (0, ok)
    signed.commit("Unsigned change\n")
    proc = rowgate("check", "commit-trailers", "--preset", "dco", "--range", "HEAD~1..HEAD", cwd=signed.path)
    assert proc.returncode == 1
    short = signed.head()[:12]
    assert proc.stdout.splitlines()[0] == (
        f"TR001 trailer-missing: {short}: no Signed-off-by trailer (need at least 1)"
    )


def test_a_zero_config_range_starts_without_the_config_or_pattern_libraries(signed: GitRepo):
    """The zero-config dco range imports what a configured one does, no more: once the defaults are cached,
    no pydantic or ruamel.yaml (config), no regex (dco has no pattern), no shutil (argparse's width)."""
    heavy = ("pydantic", "ruamel.yaml", "regex", "shutil", "dataclasses")
    probe = f"import sys\nfrom checkers.cli import main\ncode = main(sys.argv[1:])\nprint([m for m in {heavy!r} if m in sys.modules], code)\n"
    argv = ("-c", probe, "check", "commit-trailers", "--preset", "dco", "--range", "HEAD~2..HEAD")
    ok = f"OK: 2 commits in {signed.head('HEAD~2')[:12]}..{signed.head()[:12]} carry the trailer contract (dco)"
    first = python(*argv, cwd=signed.path)
    assert first.stdout.splitlines()[0] == ok and "'pydantic'" in first.stdout, (
        first.stderr
    )  # defaults validated, cached
    again = python(*argv, cwd=signed.path)
    assert again.stdout.splitlines() == [ok, "[] 0"], again.stderr


def test_zero_config_preflight_skips_what_needs_records_or_config_and_never_errors(signed: GitRepo):
    proc = rowgate("preflight", cwd=signed.path)
    lines = {line.split()[1]: line for line in proc.stdout.splitlines() if line[:5].strip() in ("ok", "SKIP")}
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for check in ("agent-record", "live-rows", "doc-checkpoint", "role-discipline"):
        assert lines[check].startswith("SKIP") and lines[check].endswith(
            "not configured here (`rowgate init`): no records in .agents/rows/"
        )
    assert "no trailer contract; pass --preset dco" in lines["commit-trailers"]
    assert lines["pr-size"].startswith("ok ")  # one default class, the whole history of a repo with no remote
    assert "ERROR" not in proc.stdout


def test_doctor_and_config_check_say_which_file_was_read(signed: GitRepo, tmp_path: Path):
    assert (
        "config:     none found (.agents/config.yaml, [tool.rowgate] in pyproject.toml)"
        in rowgate("doctor", cwd=signed.path).stdout
    )
    other = tmp_path / "elsewhere.yaml"
    other.write_text("version: 1\ntrailers: {presets: [dco]}\n")
    proc = rowgate("config", "check", "--config", str(other), cwd=signed.path)
    assert proc.stdout == f"OK: {other} (chosen by --config) is valid\n"
    proc = rowgate("config", "check", cwd=signed.path, ROWGATE_CONFIG=str(other))
    assert proc.stdout == f"OK: {other} (chosen by $ROWGATE_CONFIG) is valid\n"
    signed.write({"pyproject.toml": "[project]\nname = 'x'\n\n[tool.rowgate.trailers]\npresets = ['dco']\n"})
    assert rowgate("config", "check", cwd=signed.path).stdout == "OK: pyproject.toml [tool.rowgate] (found) is valid\n"
    proc = rowgate("check", "commit-trailers", "--range", "HEAD~1..HEAD", cwd=signed.path)
    assert proc.returncode == 0 and proc.stdout.endswith("carry the trailer contract (dco)\n")


def test_a_missing_named_config_exits_3(signed: GitRepo):
    proc = rowgate("preflight", "--config", "nope.yaml", cwd=signed.path)
    assert (proc.returncode, proc.stderr) == (
        3,
        "rowgate: nope.yaml: no such file or directory (the config named by --config)\n",
    )


def test_unknown_check_and_rule_names_in_the_config_name_the_known_ones(signed: GitRepo):
    signed.write({".agents/config.yaml": "version: 1\nchecks:\n  pr-sise: {enabled: false}\nignore: [TR999]\n"})
    proc = rowgate("preflight", cwd=signed.path)
    err = proc.stderr.splitlines()
    assert proc.returncode == 3
    assert err[0].startswith(
        "rowgate: .agents/config.yaml:3: checks.pr-sise: unknown check 'pr-sise' (did you mean 'pr-size'?); "
        "known checks: agent-record, live-rows, "
    )
    assert err[1] == (  # the nearest rule, not all of them on one line
        "rowgate: .agents/config.yaml:4: ignore.0: unknown rule 'TR999' (did you mean TR009 signoff-not-author?); "
        "`rowgate rules` lists the "
        f"{len(__import__('checkers.registry').registry.all_rules())} rules and explains each"
    )


def test_a_disabled_check_is_named_and_not_run(signed: GitRepo):
    signed.write(
        {".agents/config.yaml": "version: 1\ntrailers: {presets: [dco]}\nchecks:\n  pr-size: {enabled: false}\n"}
    )
    proc = rowgate("preflight", "--only", "pr-size", "--only", "commit-trailers", cwd=signed.path)
    assert proc.returncode == 0
    assert (
        "--    pr-size                  not run: disabled in .agents/config.yaml "
        "(checks.pr-size.enabled: false)" in proc.stdout.splitlines()
    )
    assert proc.stdout.splitlines()[-1].startswith("All gates green (1 gates")
    doc = json.loads(rowgate("preflight", "--format", "json", cwd=signed.path).stdout)
    assert {"check": "pr-size", "reason": "disabled in .agents/config.yaml (checks.pr-size.enabled: false)"} in doc[
        "not_run"
    ]
    alone = rowgate("check", "pr-size", cwd=signed.path)  # its hook: a skip with the reason, exit 0
    assert (alone.returncode, alone.stdout) == (
        0,
        "SKIP: pr-size: disabled in .agents/config.yaml (checks.pr-size.enabled: false)\n",
    )


def test_rules_are_ignored_by_id_or_name_everywhere_or_per_path(signed: GitRepo):
    classes = "pr_size:\n  classes:\n    - {name: src, paths: [src/**, .agents/**], budget: 1000}\n"
    signed.commit("Docs" + SIGNED, {"docs/x.txt": "x\n"})
    signed.write({".agents/config.yaml": "version: 1\n" + classes})
    failing = rowgate("check", "pr-size", "--all-files", cwd=signed.path)
    assert failing.returncode == 1 and "PS001 path-unclassified" in failing.stdout
    signed.write(
        {
            ".agents/config.yaml": "version: 1\n" + classes + "per_file_ignores:\n"
            "  '*.md': [path-unclassified]\n  'docs/**': [PS001]\n"
        }
    )
    proc = rowgate("check", "pr-size", "--all-files", cwd=signed.path)
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.splitlines()[-1] == (
        "OK: pr-size: 5 tracked files examined; 2 findings ignored by .agents/config.yaml"
    )
    signed.write({".agents/config.yaml": "version: 1\n" + classes + "per_file_ignores: {'*.md': [PS001]}\n"})
    proc = rowgate("check", "pr-size", "--all-files", cwd=signed.path)
    assert (
        proc.returncode == 1
        and "1 finding in 5 tracked files (1 finding ignored by .agents/config.yaml)" in proc.stdout
    )
    signed.write({".agents/config.yaml": "version: 1\n" + classes + "ignore: [PS001]\n"})
    assert rowgate("check", "pr-size", "--all-files", cwd=signed.path).returncode == 0


def test_range_with_message_file_is_a_usage_error(signed: GitRepo, tmp_path: Path):
    (tmp_path / "msg").write_text("x\n")
    proc = rowgate(
        "check",
        "commit-trailers",
        "--preset",
        "dco",
        "--range",
        "HEAD~1..HEAD",
        "--message-file",
        str(tmp_path / "msg"),
        cwd=signed.path,
    )
    assert proc.returncode == 2 and "not allowed with argument" in proc.stderr


def test_hook_mode_finds_the_author_through_git_var_and_hints_without_amend(signed: GitRepo, tmp_path: Path):
    signed.git("config", "user.name", "Bea Config")
    signed.git("config", "user.email", "bea@example.com")
    unset = ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL")  # as in a commit-msg hook: git var reads user.*
    (tmp_path / "good").write_text("Add x\n\nSigned-off-by: Bea Config <bea@example.com>\n")
    (tmp_path / "bad").write_text("Add x\n")
    good = rowgate(
        "check",
        "commit-trailers",
        "--preset",
        "dco",
        "--message-file",
        str(tmp_path / "good"),
        cwd=signed.path,
        unset=unset,
    )
    assert good.returncode == 0, good.stdout
    bad = rowgate(
        "check",
        "commit-trailers",
        "--preset",
        "dco",
        "--message-file",
        str(tmp_path / "bad"),
        cwd=signed.path,
        unset=unset,
    )
    assert bad.returncode == 1
    assert bad.stdout.splitlines()[:2] == [
        f"{tmp_path / 'bad'}: TR001 trailer-missing: no Signed-off-by trailer (need at least 1)",
        (
            "    fix: commit again with git commit -s, which adds `Signed-off-by: Bea Config <bea@example.com>`; "
            "or fix the author (git config user.name / user.email), or map the identity in .mailmap"
        ),
    ]
    assert "--amend" not in bad.stdout


def test_range_mode_hint_rebases_from_the_merge_base(signed: GitRepo):
    base = signed.head()
    signed.commit("Unsigned\n")
    proc = rowgate("check", "commit-trailers", "--preset", "dco", "--range", "HEAD~1..HEAD", cwd=signed.path)
    assert proc.stdout.splitlines()[1] == (
        f"    fix: sign off each listed commit as its author: git rebase --signoff {base[:12]} (only the last "
        "commit: git commit --amend -s); or fix the author, or map the identity in .mailmap"
    )


# --- pre-push: the branch being pushed is judged whole -----------------------------------------------


def _pushed(tmp_path: Path) -> tuple[GitRepo, Path]:
    """A clone of a remote whose main has one commit, and a branch with two 60-line commits."""
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    repo = init_repo(tmp_path / "work")
    repo.commit("Start" + SIGNED, {"README.md": "x\n"})
    repo.git("remote", "add", "origin", str(remote))
    repo.git("push", "-q", "origin", "main")
    repo.git("remote", "set-head", "origin", "main")
    repo.git("checkout", "-q", "-b", "feature")
    repo.write(
        {".agents/config.yaml": "version: 1\npr_size:\n  classes:\n    - {name: all, paths: ['**'], budget: 100}\n"}
    )
    repo.commit("First half" + SIGNED, {"src/a.py": "".join(f"a{i}\n" for i in range(60))})
    return repo, remote


def test_pre_push_judges_the_branch_not_the_push(tmp_path: Path):
    repo, _ = _pushed(tmp_path)
    first = repo.head()
    repo.git("push", "-q", "origin", "feature")
    repo.commit("Second half" + SIGNED, {"src/b.py": "".join(f"b{i}\n" for i in range(60))})
    env = {
        "PRE_COMMIT_FROM_REF": first,
        "PRE_COMMIT_TO_REF": repo.head(),
        "PRE_COMMIT_REMOTE_NAME": "origin",
        "PRE_COMMIT_REMOTE_BRANCH": "refs/heads/feature",
        "PRE_COMMIT_LOCAL_BRANCH": "refs/heads/feature",
    }
    proc = rowgate("check", "pr-size", cwd=repo.path, **env)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # 60 + 60 + config lines > 100, though this push is 60
    assert "PS002 class-over-budget: all changes" in proc.stdout
    assert "base origin/main (pre-push: the default branch of origin)" in proc.stderr


def test_first_push_to_an_empty_remote_judges_the_pushed_commits(tmp_path: Path):
    remote = tmp_path / "empty.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    repo = init_repo(tmp_path / "work")
    repo.commit("Start" + SIGNED, {"README.md": "x\n"})
    repo.commit("Unsigned\n", {"src/a.py": "a\n"})
    repo.git("remote", "add", "origin", str(remote))
    # pre-commit's pre-push stage for a push that includes the root commit sets no from/to refs
    env = {
        "PRE_COMMIT_REMOTE_NAME": "origin",
        "PRE_COMMIT_REMOTE_URL": str(remote),
        "PRE_COMMIT_REMOTE_BRANCH": "refs/heads/main",
        "PRE_COMMIT_LOCAL_BRANCH": "refs/heads/main",
    }
    proc = rowgate("check", "commit-trailers", "--preset", "dco", cwd=repo.path, **env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip() == (
        "rowgate: base none (pre-push to origin: the remote has none of its history; for a new fork or mirror "
        "that already holds it, `git fetch origin` first (or set $ROWGATE_BASE) so only new commits are judged): "
        f"every commit of head {repo.head()[:12]}, from the root"
    )
    assert proc.stdout.startswith(f"TR001 trailer-missing: {repo.head()[:12]}: no Signed-off-by")
    repo.git("commit", "-q", "--amend", "-s", "--no-edit")
    proc = rowgate("check", "commit-trailers", "--preset", "dco", cwd=repo.path, **env)
    assert proc.returncode == 0 and "OK: 2 commits in the root.." in proc.stdout
