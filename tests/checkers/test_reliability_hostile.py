"""A branch's content is untrusted (issue #34): the repository's config cannot make rowgate run a program,
configured globs and patterns cannot hang a run, reads are bounded and stay inside the repository, a branch
cannot switch a gate off about itself, and one bad record is one finding. Real repositories throughout."""

from __future__ import annotations

import contextlib
import io
import signal
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from checkers.cli import main
from tests.conftest import MINIMAL_CONFIG, GitRepo, init_repo, row_yaml


@contextlib.contextmanager
def no_hang(seconds: int = 60) -> Iterator[None]:
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


def quiet_main(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse usage errors
            code = int(exc.code or 0)
    return code, out.getvalue()


# --- 1. programs from the repository's config never run ---------------------------------------------

# Every config key whose value git may run as a program, with the attribute that routes files to a driver.
PROGRAM_KEYS = (
    "filter.evil.clean",
    "filter.evil.smudge",
    "filter.evilp.process",
    "diff.evil.textconv",
    "diff.evil.command",
    "diff.external",
    "merge.evil.driver",
    "core.fsmonitor",
    "core.pager",
    "core.askPass",
    "core.sshCommand",
    "core.editor",
    "sequence.editor",
    "gpg.program",
    "credential.helper",
    "core.alternateRefsCommand",
    "uploadpack.packObjectsHook",
)
HOOKS = ("pre-commit", "post-checkout", "post-index-change", "reference-transaction", "fsmonitor-watchman")


def _spy(path: Path, name: str, marker: Path) -> str:
    """A program that records that it ran (and passes its input through, as a filter would)."""
    script = path / f"spy-{name.replace('.', '-')}"
    script.write_text(f'#!/bin/sh\necho {name} >> "{marker}"\nexec cat "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


@pytest.fixture
def armed(tmp_path: Path) -> tuple[GitRepo, Path]:
    """A repository on a branch `feature` off `main` whose history changes a row's state and the docs, and
    whose own config then names a spy program for every program-valued key; a work-tree file is changed
    afterwards, so a `git status` would run the clean filter to compare it."""
    repo = init_repo(tmp_path / "repo")
    repo.commit(
        "Initial layout\n\nRow: GOV-CORE\n",
        {
            ".agents/config.yaml": MINIMAL_CONFIG,
            ".agents/rows/GOV-CORE.yaml": row_yaml("GOV-CORE", state="INVENTORIED"),
            ".agents/specs/GOV-CORE.md": "# GOV-CORE\n\n## Goal\nx\n\n## Acceptance\ny\n\n## Issues\n- #1\n",
            ".gitattributes": "* filter=evil diff=evil merge=evil\n*.md filter=evilp\n",
            "docs/a.md": "a\n",
        },
    )
    repo.git("checkout", "-q", "-b", "feature")
    repo.commit(
        "Move GOV-CORE on\n\nRow: GOV-CORE\n",
        {".agents/rows/GOV-CORE.yaml": row_yaml("GOV-CORE", state="READY"), "docs/a.md": "b\n"},
    )
    marker = tmp_path / "ran"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for key in PROGRAM_KEYS:
        repo.git("config", key, _spy(bin_dir, key, marker))
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for hook in HOOKS:
        _spy(hooks, hook, marker)
        (hooks / f"spy-{hook}").rename(hooks / hook)
    repo.git("config", "core.hooksPath", str(hooks))
    repo.git("config", "filter.evil.required", "true")
    (repo.path / "docs" / "a.md").write_text("changed in the work tree\n")
    (repo.path / ".agents" / "specs" / "GOV-CORE.md").write_text(
        "# GOV-CORE\n\n## Goal\nx\n\n## Acceptance\nz\n\n## Issues\n- #1\n"
    )
    return repo, marker


def test_no_program_from_the_repository_config_runs(armed: tuple[GitRepo, Path]):
    from checkers import registry

    repo, marker = armed
    # The spies work: git itself runs them for the commands rowgate must not use as it does.
    repo.git("-c", "core.pager=cat", "log", "-p", "-1", "--format=%H")
    repo.git("status", "--porcelain")
    assert {"diff.evil.textconv", "filter.evil.clean"} <= set(marker.read_text().split())
    marker.unlink()

    r = str(repo.path)
    commands = [
        ["doctor", "--repo", r],
        ["preflight", "--repo", r, "--base", "main"],
        *[["check", spec.id, "--repo", r, *base] for spec in registry.CHECKS for base in ([], ["--base", "main"])],
        ["rules"],
        ["config", "check", "--repo", r],
        ["render", "--repo", r],
        ["row", "set", "GOV-CORE", "--state", "READY", "--repo", r],
        ["row", "new", "GOV-NEW", "--area", "GOV", "--title", "A new row", "--repo", r],
        ["claim", "GOV-NEW", "--branch", "row/GOV-NEW", "--owner", "ada", "--repo", r],
        ["init", "--dry-run", "--repo", r],
    ]
    ran = []
    with no_hang(240):
        for argv in commands:
            code, out = quiet_main(argv)
            assert "internal error" not in out, (argv, out)
            ran.append(code)
    assert not marker.exists(), marker.read_text()
    assert ran.count(2) <= len(registry.CHECKS)  # at most one spelling of each check is a usage error


# --- 2. configured globs and patterns cannot hang a run -------------------------------------------------


def test_a_pathological_pr_size_glob_on_a_long_tracked_name_finishes(tmp_path: Path):
    """`*a*a*a*a*a*a*b` and `**/**/**/**/**/x` took about n^7 steps in the regex translation of a glob on
    one long name (past 60 s): now every check that matches globs sees the same answer in one pass."""
    from checkers import registry
    from checkers.config import load_config
    from checkers.context import Context
    from checkers.preflight import check_parser, run_check

    repo = init_repo(tmp_path / "repo")
    config = (
        "version: 1\npr_size:\n  classes:\n"
        '    - {name: odd, paths: ["*a*a*a*a*a*a*b", "**/**/**/**/**/x"], budget: 10}\n'
        '    - {name: rest, paths: ["**"], budget: null}\n'
        'env_doc:\n  include: ["*a*a*a*a*a*a*b", "**/**/**/**/**/x/*.py"]\n'
    )
    repo.commit("Base", {".agents/config.yaml": config})
    repo.git("checkout", "-q", "-b", "feature")
    long_name = "a" * 250
    deep = "/".join(["a"] * 60) + "/y"
    repo.commit("Long names", {long_name: "x\n", deep: "y\n"})
    spec = registry.get("pr-size")
    ctx = Context(root=repo.path, config=load_config(repo.path), env={}, notes=io.StringIO())
    with no_hang(60):
        result = run_check(spec, ctx, check_parser(spec).parse_args(["--base", "main"]))
        files = ctx.files(["*a*a*a*a*a*a*b", "**/**/**/**/**/x"], ["**/**/**/**/**/y"])
    assert result.status.value == "pass", result.summary
    assert result.summary == "OK: every path class is within its review budget (2 files, 2 lines)"
    assert files == []


def test_configured_patterns_share_one_time_budget_per_check_run(rowgate_repo: GitRepo, monkeypatch):
    """The per-value limit (1 s) alone let 140 values that each take most of it run for minutes; a check
    run's configured patterns now share one budget. Each value below stays under the per-value limit (the
    run before this budget passed, slowly); together they exceed the run's budget, which is an error."""
    import regex

    from checkers import registry, safe_regex
    from checkers.config import load_config
    from checkers.context import Context
    from checkers.preflight import check_parser, run_check

    slow = "(a|aa)+c"
    # the value length whose match takes a clear slice of the per-value limit on this machine (calibration,
    # not an assertion): the budget below is a fraction of what the range's values need together
    n = 16
    while True:
        try:
            regex.fullmatch(slow, "a" * n + "b", timeout=0.05)
        except TimeoutError:
            break
        n += 1
    monkeypatch.setattr(safe_regex, "RUN_BUDGET_S", 0.3)
    monkeypatch.setattr(safe_regex, "TIMEOUT_S", 10.0)
    rowgate_repo.commit(
        "Configure\n\nRow: GOV-CORE\n",
        {
            ".agents/config.yaml": MINIMAL_CONFIG + "trailers:\n  keys:\n"
            f"    - key: Row\n      min: 1\n      pattern: '{slow}'\n"
        },
    )
    base = rowgate_repo.head()
    for i in range(12):
        rowgate_repo.commit(f"Work {i}\n\nRow: {'a' * n}{'b' * (i + 1)}\n", {f"f{i}.txt": f"{i}\n"})
    spec = registry.get("commit-trailers")
    ctx = Context(root=rowgate_repo.path, config=load_config(rowgate_repo.path), env={}, notes=io.StringIO())
    with no_hang(120):
        result = run_check(spec, ctx, check_parser(spec).parse_args(["--base", base]))
    assert (result.status.value, result.summary) == (
        "error",
        f"configured patterns ran past their budget of 0.3s for this check run (last: '{slow}')",
    )
