"""Hostile inputs on real repositories: repository config and environment that would redirect or reparse
git, shallow history, control characters in names, paths out of the tree, special files, runaway patterns,
ranges that examine nothing, and failures that must end in one line instead of a traceback."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from checkers.checks.records import live_rows, role_discipline
from checkers.cli import main
from checkers.config import load_config
from checkers.context import Context
from checkers.gitio import Git, discover_repo
from checkers.output import render
from checkers.results import Result, Rule
from tests.conftest import MINIMAL_CONFIG, GitRepo, init_repo, row_yaml


@contextlib.contextmanager
def no_hang(seconds: int = 30) -> Iterator[None]:
    """Fail (instead of hanging the suite) when the block blocks or loops: a guard, not a timing assertion."""

    def expire(*_: object) -> None:
        raise TimeoutError(f"still running after {seconds}s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _ctx(repo: GitRepo) -> Context:
    return Context(root=repo.path, config=load_config(repo.path), env={})


@pytest.fixture
def trailer(rowgate_repo: GitRepo) -> GitRepo:
    cutover = rowgate_repo.head()
    rowgate_repo.commit(
        "Configure\n\nRow: GOV-CORE\n",
        {".agents/config.yaml": MINIMAL_CONFIG + f"cutover: {cutover}\nrole:\n  mode: trailer\n"},
    )
    return rowgate_repo


# --- git isolation ------------------------------------------------------------------------------------


def test_repository_trailer_separators_do_not_change_role_discipline(trailer: GitRepo):
    sha = trailer.commit("Work\n\nRow# GOV-CORE\n", {"a.py": "x\n"})
    trailer.git("config", "trailer.separators", "#")
    result = role_discipline.run(_ctx(trailer), argparse.Namespace(base=None, head=None))
    assert [(f.rule, f.message) for f in result.findings] == [
        ("RD001", f"commit {sha[:12]} names no row (no Row: trailer)")
    ]


def _isolated_trailers(message: str, where: Path) -> str:
    """`git interpret-trailers --parse --no-divider` as rowgate's isolation models it: no user, system or
    repository config (run outside any repository)."""
    from checkers.gitio import git_command, git_env

    where.mkdir(exist_ok=True)
    return subprocess.run(
        git_command("interpret-trailers", "--parse", "--no-divider"),
        input=message.encode(),
        capture_output=True,
        cwd=where,
        env={**git_env(), "GIT_CEILING_DIRECTORIES": str(where.parent)},
        check=True,
    ).stdout.decode()


ALIASED = [
    ("an-alias-key", "Work\n\nr: GOV-CORE\n"),  # trailer.r.key = Row: git prints `Row: GOV-CORE`
    ("a-configured-token", "Work\n\nprose a\nprose b\nprose c\nFixes: 1\nRow: GOV-CORE\n"),  # a block for git
    ("an-abbreviated-token", "Work\n\nprose a\nprose b\nprose c\nSig: 1\nRow: GOV-CORE\n"),  # Sig ~ signoff
]


def test_repository_trailer_aliases_do_not_change_any_verdict(trailer: GitRepo, tmp_path: Path):
    """`trailer.<name>.key` (and any `trailer.<name>.*`) in the repository's own config renames trailers
    and makes paragraphs trailer blocks for git; no `-c` can unset them, so rowgate parses the messages
    itself, and its verdict is git's without config."""
    from checkers.gitio import git_command, git_env

    shas = [trailer.commit(msg, {f"{name}.py": "x\n"}) for name, msg in ALIASED]
    for key, value in (("trailer.r.key", "Row"), ("trailer.fixes.key", "Fixes"), ("trailer.signoff.where", "end")):
        trailer.git("config", key, value)
    bite = 0
    for name, msg in ALIASED:
        in_repo = subprocess.run(
            git_command("interpret-trailers", "--parse", "--no-divider"),
            input=msg.encode(),
            capture_output=True,
            cwd=trailer.path,
            env=git_env(),
            check=True,
        ).stdout.decode()
        isolated = _isolated_trailers(msg, tmp_path / "nowhere")
        bite += in_repo != isolated
        assert "Row: GOV-CORE" not in isolated, (name, isolated)  # no Row trailer without the aliases
    assert bite == len(ALIASED)  # each alias changes what git itself parses in this repository
    commits = Git(trailer.path).commits_with_trailers(f"{shas[0]}~1..HEAD")
    assert [c.rows for c in commits] == [(), (), ()]
    result = role_discipline.run(_ctx(trailer), argparse.Namespace(base=None, head=None))
    assert sorted(f.message for f in result.findings) == sorted(
        f"commit {sha[:12]} names no row (no Row: trailer)" for sha in shas
    )
    for _, msg in ALIASED:  # the hook reads the same message the same way
        (tmp_path / "MSG").write_text(msg)
        hook = ["check", "commit-trailers", "--preset", "row", "--message-file", str(tmp_path / "MSG")]
        assert main([*hook, "--repo", str(trailer.path)]) == 1


def test_git_dir_in_the_environment_does_not_redirect_an_explicit_repo(
    rowgate_repo: GitRepo, tmp_path: Path, monkeypatch
):
    other = init_repo(tmp_path / "other")
    other.commit("Other\n", {"o": "1"})
    monkeypatch.setenv("GIT_DIR", str(other.path / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other.path))
    assert discover_repo(rowgate_repo.path, explicit=True)[0] == rowgate_repo.path
    assert Git(rowgate_repo.path).resolve("HEAD") == rowgate_repo.head()


def test_git_dir_locates_the_repository_when_nothing_else_does(rowgate_repo: GitRepo, tmp_path: Path, monkeypatch):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    monkeypatch.setenv("GIT_DIR", str(rowgate_repo.path / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(rowgate_repo.path))
    root, _ = discover_repo(outside, explicit=False)
    assert root == rowgate_repo.path
    assert Git(root).resolve("HEAD") == rowgate_repo.head()


def test_changed_paths_keep_a_name_with_a_control_character_whole(rowgate_repo: GitRepo):
    sha = rowgate_repo.commit("Both\n", {"docs/a\x01.md": "d\n", "docs/b\nc.md": "e\n", "engine/x.py": "x\n"})
    assert sorted(Git(rowgate_repo.path).changed_paths(f"{sha}~1..{sha}")[sha]) == [
        "docs/a\x01.md",
        "docs/b\nc.md",
        "engine/x.py",
    ]


def test_a_shallow_boundary_inside_the_range_is_an_error(trailer: GitRepo, tmp_path: Path):
    """The merge base exists in the clone, but a merged side branch is cut short inside the range: its
    older commits are missing, and a check of the range would judge only part of it."""
    trailer.git("checkout", "-q", "-b", "side")
    for i in range(4):
        trailer.commit(f"Side {i}\n\nRow: GOV-CORE\n", {f"side{i}": "x\n"})
    trailer.git("checkout", "-q", "main")
    base = trailer.commit("Main\n\nRow: GOV-CORE\n", {"m": "x\n"})
    trailer.git("merge", "-q", "--no-ff", "--no-edit", "side")
    clone = tmp_path / "shallow"
    subprocess.run(
        ["git", "clone", "-q", "--depth", "3", f"file://{trailer.path}", str(clone)],
        check=True,
        env=trailer.env,
        capture_output=True,
        timeout=60,
    )
    repo = GitRepo(clone)
    assert repo.git("rev-parse", "--is-shallow-repository").strip() == "true"
    from checkers.preflight import run_check
    from checkers.registry import get

    result = run_check(get("role-discipline"), _ctx(repo), argparse.Namespace(base=base, head=None))
    assert result.status.value == "error", result.summary
    assert "crosses the shallow boundary" in result.summary
    assert result.hint == "run git fetch --unshallow (CI: fetch-depth: 0)"


# --- honest counts ------------------------------------------------------------------------------------


def test_a_range_of_only_skipped_merges_examined_nothing(trailer: GitRepo):
    trailer.git("checkout", "-q", "-b", "side")
    side = trailer.commit("Side\n\nRow: GOV-CORE\n", {"side": "1"})
    trailer.git("checkout", "-q", "main")
    trailer.git("merge", "-q", "--no-ff", "--no-edit", "side")
    result = role_discipline.run(_ctx(trailer), argparse.Namespace(base=side, head=None))
    assert (result.status.value, result.summary) == ("error", "examined 0 commits: nothing was verified")


def test_live_rows_counts_a_commit_made_on_the_claim_day(rowgate_repo: GitRepo):
    rowgate_repo.write(
        {
            ".agents/config.yaml": MINIMAL_CONFIG + "live_rows:\n  remote: null\n",
            ".agents/rows/GOV-X.yaml": row_yaml("GOV-X", state="ACTIVE", claim="c1"),
            ".agents/specs/GOV-X.md": "# x\n\n## Goal\n\n## Acceptance\n\n## Issues\n",
            ".agents/claims/c1.yaml": "id: c1\nrow: GOV-X\nbranch: row/GOV-X\nowner: ada\nsince: 2026-01-01\n",
        }
    )
    rowgate_repo.commit("Work on it\n\nRow: GOV-X\n")  # 2026-01-01T00:00:0N+00:00, the claim's day
    result = live_rows.run(_ctx(rowgate_repo), argparse.Namespace(check=True, report=False))
    assert (result.status.value, [f.message for f in result.findings]) == ("pass", [])


# --- paths from records ---------------------------------------------------------------------------------


@pytest.mark.parametrize("anchor", ["../../etc/passwd", "/etc/hostname", "out/hostname"])
def test_an_anchor_outside_the_repository_is_refused(rowgate_repo: GitRepo, capsys, anchor):
    (rowgate_repo.path / "out").symlink_to("/etc")
    before = (rowgate_repo.path / ".agents/rows/GOV-CORE.yaml").read_text()
    assert (
        main(["row", "set", "GOV-CORE", "--state", "READY", "--anchor", anchor, "--repo", str(rowgate_repo.path)]) == 1
    )
    err = capsys.readouterr().err
    assert f"anchor {anchor} is not a path inside the repository" in err and "lines)" not in err
    assert (rowgate_repo.path / ".agents/rows/GOV-CORE.yaml").read_text() == before


# --- special files ---------------------------------------------------------------------------------------


def test_a_fifo_in_the_build_dir_is_skipped_with_a_note(tmp_path: Path):
    from checkers.checks import gencode
    from checkers.config import Config, GencodeConfig

    tmp_path = init_repo(tmp_path / "repo").path
    cuda = tmp_path / "engine" / "cuda"
    cuda.mkdir(parents=True)
    (cuda / "arch_features.yaml").write_text('features:\n  p: {archs: ["9.0"], doc: "x"}\nsources:\n  a.cu: p\n')
    (cuda / "a.cu").write_text("// a\n")
    build = tmp_path / "build"
    build.mkdir()
    os.mkfifo(build / "a-0000000000000000.so")
    (build / "b-0000000000000001.so").write_bytes(b"not an object")
    ctx = Context(root=tmp_path, config=Config(gencode=GencodeConfig()), env={})
    with no_hang():
        result = gencode.run(ctx, argparse.Namespace(build_dir=build, compile_commands=None, archs=None))
    assert f"note: skipped {build / 'a-0000000000000000.so'}: a FIFO, not a regular file" in result.details


# --- configured patterns ---------------------------------------------------------------------------------


def test_a_runaway_trailer_pattern_stops_with_an_error(rowgate_repo: GitRepo, tmp_path: Path):
    from checkers.checks import commit_trailers

    rowgate_repo.write(
        {
            ".agents/config.yaml": "version: 1\nrows:\n  areas: [GOV]\ntrailers:\n  keys:\n"
            "    - key: Row\n      min: 1\n      pattern: '(a+)+$'\n"
        }
    )
    msg = tmp_path / "msg"
    msg.write_text("Subject\n\nBody.\n\nRow: " + "a" * 40 + "!\n")
    ctx = Context(root=rowgate_repo.path, config=load_config(rowgate_repo.path), env={})
    parser = argparse.ArgumentParser()
    commit_trailers.add_arguments(parser)
    args = parser.parse_args(["--message-file", str(msg)])
    from checkers.preflight import run_check
    from checkers.registry import get

    with no_hang():
        result = run_check(get("commit-trailers"), ctx, args)
    assert result.status.value in ("error", "fail"), result.summary
    if result.status.value == "error":
        assert result.summary == "pattern '(a+)+$' ran past 1s on a 41-character value"


# --- output ----------------------------------------------------------------------------------------------

PLANTED = Rule("XX001", "demo", "a demo rule").finding(
    "value x\n::error file=forged::owned\x1b[2J end", "docs/a\x01\nb.md", 3, "fix\rit"
)


def _planted() -> list[Result]:
    return [
        Result.judge("demo", [PLANTED], 1, "files", "OK"),
        Result.error("other", "summary\n::warning::forged too\x07", "hint\n::error::x"),
    ]


def test_text_output_escapes_control_characters_and_newlines():
    out = render("text", _planted(), [])
    assert "\x1b" not in out and "\x01" not in out and "\x07" not in out and "\r" not in out
    assert not [line for line in out.splitlines() if line.startswith("::")]
    assert "docs/a\\x01\\x0ab.md:3: XX001 demo: value x\\x0a::error file=forged::owned\\x1b[2J end" in out.splitlines()


def test_github_output_cannot_be_forged_from_data():
    lines = render("github", _planted(), []).splitlines()
    assert len(lines) == 3  # one command per finding and one per result, nothing else
    assert lines[0].startswith("::error file=docs/a\\x01%0Ab.md,line=3,title=XX001 demo::")
    assert lines[1] == "::notice title=demo::fail: 1 finding in 1 files"
    assert all("\x1b" not in line and "\x07" not in line for line in lines)
    assert lines[2] == "::error title=other::summary%0A::warning::forged too\\x07 (fix: hint%0A::error::x)"


def test_junit_output_stays_valid_xml():
    root = ET.fromstring(render("junit", _planted(), []).split("\n", 1)[1])
    failure = root.find("testsuite/testcase/failure")
    assert failure is not None and "\\x1b[2J" in failure.text


def test_sarif_output_escapes_messages_and_encodes_uris():
    doc = json.loads(render("sarif", _planted(), [PLANTED_RULE]))
    [res] = doc["runs"][0]["results"]
    assert res["message"]["text"] == "value x\\x0a::error file=forged::owned\\x1b[2J end (fix: fix\\x0dit)"
    assert res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "docs/a%01%0Ab.md"


PLANTED_RULE = Rule("XX001", "demo", "a demo rule")


# --- errors ----------------------------------------------------------------------------------------------


def test_a_crash_is_one_line_and_exit_3_and_debug_shows_it(rowgate_repo: GitRepo, capsys, monkeypatch):
    import checkers.commands.row as row_cmd

    def boom(*_a: object, **_k: object) -> None:
        raise RuntimeError("disk\nfell off")

    monkeypatch.setattr(row_cmd, "_row_doc", boom)
    args = ["row", "set", "GOV-CORE", "--state", "READY", "--repo", str(rowgate_repo.path)]
    assert main(args) == 3
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("rowgate: internal error: RuntimeError: disk fell off at ")
    assert line.endswith(" (run again with --debug for the traceback)")
    monkeypatch.delenv("ROWGATE_DEBUG", raising=False)
    with pytest.raises(RuntimeError):
        main([*args, "--debug"])
    monkeypatch.delenv("ROWGATE_DEBUG", raising=False)


def test_doctor_without_git_says_so_in_one_line(rowgate_repo: GitRepo):
    env = {**os.environ, "PATH": "/nonexistent"}
    proc = subprocess.run(
        [sys.executable, "-m", "checkers", "doctor", "--repo", str(rowgate_repo.path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parents[2],
        check=False,
    )
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert proc.stdout.splitlines() == [
        "git:        not found: install git 2.30 or newer",
        "repo:       git is not installed or not on PATH",
    ]


def test_doctor_runs_no_fsmonitor_program(rowgate_repo: GitRepo, tmp_path: Path, capsys, monkeypatch):
    marker = tmp_path / "ran"
    hook = tmp_path / "fsmonitor.sh"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(f"[core]\n\tfsmonitor = {hook}\n")
    monkeypatch.setenv("HOME", str(home))
    rowgate_repo.git("config", "core.fsmonitor", str(hook))
    (rowgate_repo.path / "dirty").write_text("x\n")
    rowgate_repo.git("add", "dirty")
    marker.unlink(missing_ok=True)  # the fixture's own git calls may have run it
    main(["doctor", "--repo", str(rowgate_repo.path)])
    assert "uncommitted changes" in capsys.readouterr().out
    assert not marker.exists()


# --- paths from the config ------------------------------------------------------------------------------

# Each path field of the config, the command that reads it, and a config line that sets it.
CONFIG_PATHS = [
    ("env_doc.doc", ["check", "env-doc"], "env_doc:\n  doc: {}\n"),
    ("env_doc.allowlist", ["check", "env-doc"], "env_doc:\n  allowlist: {}\n"),
    ("env_doc.docs", ["check", "env-doc"], "env_doc:\n  docs: [{}]\n"),
    ("env_doc.flags_file", ["check", "env-doc"], "env_doc:\n  flags_file: {}\n"),
    ("gencode.table", ["check", "gencode"], "gencode:\n  table: {}\n"),
    ("gencode.compile_commands", ["check", "gencode"], "gencode:\n  compile_commands: {}\n"),
    ("gencode.build_dir", ["check", "gencode"], "gencode:\n  build_dir: {}\n"),
    ("docs.flags_file", ["render"], "docs:\n  flags_file: {}\n"),
    ("docs.roadmap", ["render"], "docs:\n  roadmap: {}\n"),
    ("docs.matrices_dir", ["render"], "docs:\n  matrices_dir: {}\n"),
]
CONFIG_PATH_IDS = [f for f, _, _ in CONFIG_PATHS]


def _config_repo(repo: GitRepo, snippet: str, value: str) -> None:
    repo.write(
        {
            ".agents/config.yaml": MINIMAL_CONFIG + snippet.format(value),
            "engine/flags.py": "",
            "docs/ENVIRONMENT.md": "| flag | x |\n|---|---|\n",
            "engine/cuda/arch_features.yaml": 'features:\n  p: {archs: ["9.0"], doc: "x"}\nsources:\n  a.cu: p\n',
            "engine/cuda/a.cu": "// a\n",
        }
    )


@pytest.mark.parametrize("field,command,snippet", CONFIG_PATHS, ids=CONFIG_PATH_IDS)
@pytest.mark.parametrize("value", ["../../etc/passwd", "/etc/hostname"])
def test_a_config_path_outside_the_repository_is_a_config_error(
    rowgate_repo: GitRepo, capsys, field: str, command: list[str], snippet: str, value: str
):
    _config_repo(rowgate_repo, snippet, value)
    assert main([*command, "--repo", str(rowgate_repo.path)]) == 3
    line = snippet.count("\n", 0, snippet.index("{}")) + len(MINIMAL_CONFIG.splitlines()) + 1
    why = (
        "climbs out of the repository"
        if value.startswith("..")
        else "is an absolute path (write it relative to the repository root)"
    )
    at = f"{field}.0" if field == "env_doc.docs" else field
    assert capsys.readouterr().err.splitlines() == [
        f"rowgate: .agents/config.yaml:{line}: {at}: Value error, {value} {why}"
    ]


@pytest.mark.parametrize("field,command,snippet", CONFIG_PATHS, ids=CONFIG_PATH_IDS)
def test_a_config_path_through_a_symlink_out_is_an_error_and_nothing_is_read(
    rowgate_repo: GitRepo, capsys, tmp_path: Path, field: str, command: list[str], snippet: str
):
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret"
    secret.write_text("| flag | x |\n|---|---|\n| VT_SECRET | x |\n")
    _config_repo(rowgate_repo, snippet, "link/secret")
    (rowgate_repo.path / "link").symlink_to(outside)
    before = sorted(p.name for p in outside.iterdir())
    main(
        [*command, "--format", "json", "--repo", str(rowgate_repo.path)]
        if command[0] == "check"
        else [*command, "--repo", str(rowgate_repo.path)]
    )
    captured = capsys.readouterr()
    want = f"config {field}: link/secret leads out of the repository through a symlink (to {secret})"
    if command[0] == "check":
        [result] = json.loads(captured.out)["results"]
        assert (result["status"], result["summary"]) == ("error", want), result
        assert result["hint"] == f"set {field} to a path inside the repository, relative to its root"
    else:
        assert captured.err.splitlines()[0] == f"rowgate: {want}", captured.err
    assert "VT_SECRET" not in captured.out + captured.err
    assert sorted(p.name for p in outside.iterdir()) == before  # nothing written out there either
