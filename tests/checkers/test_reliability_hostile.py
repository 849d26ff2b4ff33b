"""A branch's content is untrusted (issue #34): the repository's config cannot make rowgate run a program,
configured globs and patterns cannot hang a run, reads are bounded and stay inside the repository, a branch
cannot switch a gate off about itself, and one bad record is one finding. Real repositories throughout."""

from __future__ import annotations

import contextlib
import io
import os
import re
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
        ["preflight", "--repo", r, "--base", "main", "--baseline"],
        ["ci", "base", "--repo", r, "--default-branch", "main"],
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
            assert code != 2 or argv[0] == "check", (argv, out)
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


# --- 3. reads are bounded, confined, and only of regular files -------------------------------------------


def _records_problems(repo: GitRepo) -> list[str]:
    from checkers.records import load_records

    with no_hang(30):
        rec = load_records(repo.path)
    return [line for p in rec.problems for line in p.lines()]


@pytest.mark.parametrize("where", [".agents/rows/GOV-ZERO.yaml", ".agents/specs/GOV-ZERO.md"])
def test_a_record_linked_to_dev_zero_is_one_problem_not_a_read_without_end(rowgate_repo: GitRepo, where: str):
    (rowgate_repo.path / where).symlink_to("/dev/zero")
    assert _records_problems(rowgate_repo) == [
        f"{where}: is a symlink that leads out of the repository (to /dev/zero); not read"
    ]


def test_a_record_linked_out_of_the_repository_is_never_read(rowgate_repo: GitRepo, tmp_path: Path):
    outside = tmp_path / "outside.yaml"
    outside.write_text(row_yaml("GOV-OUT").replace('"Row GOV-OUT"', '"secret outside title"'))
    (rowgate_repo.path / ".agents/rows/GOV-OUT.yaml").symlink_to(outside)
    assert _records_problems(rowgate_repo) == [
        f".agents/rows/GOV-OUT.yaml: is a symlink that leads out of the repository (to {outside}); not read"
    ]
    code, out = quiet_main(["render", "--repo", str(rowgate_repo.path)])
    assert "secret outside title" not in out
    roadmap = rowgate_repo.path / "docs" / "ROADMAP.md"
    assert not roadmap.exists() or "secret outside title" not in roadmap.read_text()


def test_fifos_directories_and_bad_bytes_are_one_problem_each(rowgate_repo: GitRepo):
    agents = rowgate_repo.path / ".agents"
    os.mkfifo(agents / "rows" / "GOV-FIFO.yaml")
    (agents / "rows" / "GOV-DIR.yaml").mkdir()
    (agents / "specs" / "GOV-DIR.md").mkdir()
    (agents / "specs" / "GOV-BAD.md").write_bytes(b"# GOV-BAD\n\n## Goal\n\xff\n")
    (agents / "rows" / "GOV-FF.yaml").write_bytes(row_yaml("GOV-FF").encode().replace(b"Row GOV-FF", b"\xff"))
    (agents / "issues" / "2026").mkdir(parents=True)
    (agents / "issues" / "2026" / "ISSUE-1.md").write_bytes(b"---\nnumber: 1\n---\n\xfe\n")
    assert sorted(_records_problems(rowgate_repo)) == [
        ".agents/issues/2026/ISSUE-1.md: is not UTF-8 text (byte 18: invalid start byte)",
        ".agents/rows/GOV-DIR.yaml: is a directory, not a file; not read",
        ".agents/rows/GOV-FF.yaml: not UTF-8 text (invalid start byte)",
        ".agents/rows/GOV-FIFO.yaml: is a FIFO, not a file; not read",
        ".agents/specs/GOV-BAD.md: is not UTF-8 text (byte 19: invalid start byte)",
        ".agents/specs/GOV-DIR.md: is a directory, not a file; not read",
    ]
    # every record command goes on: the other rows are judged and written
    r = str(rowgate_repo.path)
    with no_hang(60):
        for argv in (
            ["check", "agent-record", "--repo", r],
            ["check", "live-rows", "--repo", r],
            ["render", "--repo", r],
            ["row", "set", "GOV-CORE", "--state", "READY", "--repo", r],
        ):
            code, out = quiet_main(argv)
            assert "internal error" not in out and "Traceback" not in out, (argv, out)
    assert quiet_main(["row", "set", "GOV-CORE", "--state", "READY", "--repo", r])[0] == 0


@pytest.mark.parametrize("name", [".agents/config.yaml", "pyproject.toml"])
@pytest.mark.parametrize("kind", ["dev-zero", "fifo"])
def test_a_config_that_is_dev_zero_or_a_fifo_is_a_one_line_error(tmp_path: Path, name: str, kind: str):
    repo = init_repo(tmp_path / "repo")
    repo.commit("Initial", {"a.txt": "a\n"})
    target = repo.path / name
    target.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to("/dev/zero")
    with no_hang(30):
        code, out = quiet_main(["config", "check", "--repo", str(repo.path)])
    if name == "pyproject.toml":  # no readable pyproject.toml: the defaults
        assert code == 0, out
        return
    why = "is a FIFO, not a file" if kind == "fifo" else "is a symlink that leads out of the repository (to /dev/zero)"
    assert code == 3 and f"{name}: {why}; not read" in out, out
    assert "Traceback" not in out


def test_env_doc_refuses_a_source_past_its_cap_before_reading_it(tmp_path: Path):
    from checkers import boundedio

    repo = init_repo(tmp_path / "repo")
    repo.commit(
        "Sources",
        {
            "docs/ENVIRONMENT.md": "| Variable | Meaning |\n|---|---|\n| VT_A | a |\n",
            "engine/a.py": 'import os\nos.environ.get("VT_A")\n',
            "engine/huge.cu": "x" * 64,
        },
    )
    with open(repo.path / "engine/huge.cu", "r+b") as f:  # sparse: a size without the bytes
        f.truncate(boundedio.SOURCE_CAP + 1)
    code, out = quiet_main(["check", "env-doc", "--repo", str(repo.path)])
    assert code == 3, out
    assert f"engine/huge.cu is {boundedio.SOURCE_CAP + 1:,} bytes (limit {boundedio.SOURCE_CAP:,}); not read" in out


# --- 6. the records lock: stale locks broken safely, row new all or nothing, temporary files swept ------


def _lock_line(**fields: object) -> str:
    return " ".join(f"{k}={v}" for k, v in fields.items()) + "\n"


def _held(agents: Path) -> bool:
    """Whether a writer waiting no time at all finds the lock held."""
    from checkers import atomicio

    try:
        with atomicio.records_lock(agents, timeout_s=0):
            return False
    except atomicio.LockTimeout:
        return True


def test_stale_locks_are_broken_and_live_ones_kept(tmp_path: Path):
    from checkers import atomicio

    host, me, lock = os.uname().nodename, os.getpid(), tmp_path / "rowgate.lock"
    boot, start = atomicio._boot_id(), atomicio._start_ticks(os.getpid())
    cases = {
        "a live process on this host": (_lock_line(pid=me, host=host, boot=boot, start=start), None, True),
        "a young lock of another host": (_lock_line(pid=1, host="elsewhere"), None, True),
        "an old lock of another host": (_lock_line(pid=1, host="elsewhere"), atomicio.STALE_AFTER_S + 5, False),
        "a reused pid (another start time)": (_lock_line(pid=me, host=host, boot=boot, start="1"), None, False),
        "a previous boot of this host": (_lock_line(pid=me, host=host, boot="another-boot", start=start), None, False),
        "an empty lock file": ("", None, False),
        "a lock without a pid": ("garbage\n", None, False),
    }
    for what, (text, age, held) in cases.items():
        lock.write_text(text)
        if age is not None:
            old = os.stat(lock).st_mtime - age
            os.utime(lock, (old, old))
        with no_hang(20):
            assert _held(tmp_path) == held, what
        lock.unlink(missing_ok=True)


@pytest.mark.parametrize("kind", ["fifo", "directory", "dev-zero"])
def test_a_lock_that_is_no_file_is_broken_without_blocking(tmp_path: Path, kind: str):
    lock = tmp_path / "rowgate.lock"
    if kind == "fifo":
        os.mkfifo(lock)
    elif kind == "directory":
        lock.mkdir()
    else:
        lock.symlink_to("/dev/zero")
    with no_hang(20):
        assert not _held(tmp_path)
    assert not os.path.lexists(lock)


def test_temporary_files_of_killed_writers_are_swept_once_the_lock_is_held(tmp_path: Path, monkeypatch):
    import subprocess
    import sys

    from checkers import atomicio

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    rows = tmp_path / "rows"
    rows.mkdir()
    left = rows / f".GOV-CORE.yaml.{dead.pid}.0123abcd.tmp"
    live = rows / f".GOV-CORE.yaml.{os.getpid()}.0123abcd.tmp"
    ancient = rows / ".GOV-X.yaml.1.0123abcd.tmp"
    for p in (left, live, ancient):
        p.write_text("half\n")
    old = os.stat(ancient).st_mtime - atomicio.STALE_AFTER_S - 5
    os.utime(ancient, (old, old))
    monkeypatch.setattr(atomicio, "TEMP_GRACE_S", 0.0)
    with atomicio.records_lock(tmp_path, timeout_s=0):
        pass
    assert sorted(p.name for p in rows.iterdir()) == [live.name]


def test_a_kill_at_any_step_of_row_new_leaves_nothing_or_a_complete_row(rowgate_repo: GitRepo, monkeypatch):
    """kill -9 before each file-system step of `row new` (each link, rename, unlink, mkdir): afterwards there
    is no row, or the row and its spec; a re-run succeeds and sweeps what the kill left."""
    import signal as sig

    from checkers import atomicio
    from tests.checkers.test_reliability_records import _forked

    monkeypatch.setattr(atomicio, "TEMP_GRACE_S", 0.0)
    events = ("os.link", "os.rename", "os.remove", "os.mkdir")
    row = rowgate_repo.path / ".agents/rows/GOV-NEW.yaml"
    spec = rowgate_repo.path / ".agents/specs/GOV-NEW.md"
    argv = ["row", "new", "GOV-NEW", "--area", "GOV", "--title", "New", "--repo", str(rowgate_repo.path)]

    def killed_at(n: int) -> int:
        import sys

        seen = [0]

        def hook(event: str, _args: object) -> None:
            if event in events:
                seen[0] += 1
                if seen[0] == n:
                    os.kill(os.getpid(), sig.SIGKILL)

        sys.addaudithook(hook)
        return main(argv)

    kills = 0
    for n in range(1, 40):
        rc, err = _forked(killed_at, n)
        assert os.path.lexists(row) <= os.path.lexists(spec), (n, rc)  # never a row without its spec
        if rc == 0:
            break
        assert rc == -sig.SIGKILL, (n, rc, err)
        kills += 1
        if not os.path.lexists(row):  # killed before the row: a re-run completes whatever the kill left
            rc, err = _forked(lambda: main(argv))
            assert rc == 0, (n, err)
        assert row.is_file() and spec.is_file(), n
        rc, err = _forked(lambda: main(["row", "set", "GOV-NEW", "--state", "READY", "--repo", argv[-1]]))
        assert rc == 0, (n, err)  # the next writer takes the lock the kill left, and sweeps its temporary files
        assert not list((rowgate_repo.path / ".agents").rglob("*.tmp")), n
        assert not os.path.lexists(rowgate_repo.path / ".agents/rowgate.lock")
        row.unlink()
        spec.unlink()
    assert kills >= 4


# --- 5. a newline in the repository's path ------------------------------------------------------------------


def test_a_newline_in_the_repository_path_names_that_repository(tmp_path: Path):
    """`rev-parse --show-toplevel` cut at the newline named the neighbour `repo`, which rowgate then
    judged and wrote into."""
    from checkers.gitio import discover_repo

    neighbour = init_repo(tmp_path / "repo")
    neighbour.commit(
        "Neighbour", {".agents/config.yaml": MINIMAL_CONFIG, ".agents/rows/GOV-CORE.yaml": row_yaml("GOV-CORE")}
    )
    odd = init_repo(tmp_path / "repo\nevil")
    odd.commit(
        "Odd",
        {
            ".agents/config.yaml": MINIMAL_CONFIG,
            ".agents/rows/GOV-CORE.yaml": row_yaml("GOV-CORE", state="INVENTORIED"),
            ".agents/specs/GOV-CORE.md": "# GOV-CORE\n\n## Goal\nx\n\n## Acceptance\ny\n\n## Issues\n- #1\n",
        },
    )
    root, git_dir = discover_repo(odd.path)
    assert (root, git_dir) == (odd.path.resolve(), (odd.path / ".git").resolve())
    before = (neighbour.path / ".agents/rows/GOV-CORE.yaml").read_bytes()
    code, out = quiet_main(["row", "set", "GOV-CORE", "--state", "READY", "--repo", str(odd.path)])
    assert code == 0, out
    assert "state: READY" in (odd.path / ".agents/rows/GOV-CORE.yaml").read_text()
    assert (neighbour.path / ".agents/rows/GOV-CORE.yaml").read_bytes() == before


# --- 7. output: any input gives valid output in every format, with nothing that reorders or hides text ---

UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def test_every_format_escapes_c1_bidi_and_undecodable_names():
    """An invalid-UTF-8 file name (a lone surrogate after surrogateescape), a CSI (U+009B) and a
    right-to-left override in a finding: JUnit stays valid XML, and no format writes any of them raw."""
    import json
    import xml.etree.ElementTree as ET

    from checkers.output import FORMATS, render
    from checkers.results import Result, Rule

    finding = Rule("XX001", "demo", "a demo rule").finding(
        "value \x9b2J cleared \u202eexe.txt <!-- hidden", "docs/\udcff\udcfe.md", 3, "fix \u2066it\u2069"
    )
    results = [
        Result.judge("demo", [finding], 1, "files", "OK"),
        Result.error("other", "summary \u009b \u202e", "hint \udcff"),
    ]
    for fmt in FORMATS:
        out = render(fmt, results, [])
        out.encode("utf-8")  # no lone surrogate: the output can be written
        assert not UNSAFE.search(out.replace("\n", "").replace("\t", "")), (fmt, out)
    junit = render("junit", results, [])
    ET.fromstring(junit.encode("utf-8"))  # valid XML
    assert "docs/\\xff\\xfe.md:3" in junit and "\\x9b2J" in junit and "\\u202eexe" in junit
    doc = json.loads(render("json", results, []))
    assert doc["results"][0]["findings"][0]["message"].startswith("value \x9b2J")  # JSON keeps data, escaped


def test_a_row_title_cannot_hide_the_rendered_page(rowgate_repo: GitRepo):
    """`<!--` in a title opened an HTML comment that hid the rest of docs/ROADMAP.md; bidi and C1 controls
    reached it raw."""
    title = "Evil <!-- hides the rest \\u202e\\x9b"  # YAML escapes: the record holds the characters
    rowgate_repo.write({".agents/rows/GOV-EVIL.yaml": row_yaml("GOV-EVIL").replace('"Row GOV-EVIL"', f'"{title}"')})
    (rowgate_repo.path / ".agents/specs/GOV-EVIL.md").write_text("# GOV-EVIL\n\n## Goal\nx\n")
    code, out = quiet_main(["render", "--repo", str(rowgate_repo.path)])
    assert code == 0, out
    views = [p for p in (rowgate_repo.path / "docs").rglob("*.md")]
    texts = {p.name: p.read_text() for p in views}
    assert any("Evil &lt;!-- hides the rest \\u202e\\x9b" in t for t in texts.values()), texts
    assert not any("<!-- hides" in t or UNSAFE.search(t) for t in texts.values())
