"""Record writes under faults: concurrent writers, a kill at every point of a write, a full disk, a
file-size limit, orphan claims. Each test runs the real `rowgate` commands on a real repository."""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import signal
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from checkers import atomicio
from checkers.cli import main
from checkers.records import Row
from checkers.yamlio import load_model
from tests.conftest import MINIMAL_CONFIG, GitRepo, row_yaml

STATES = "  states:\n    ACTIVE: {spec: true, claim: true}\n    READY: {spec: true}\n"
ROW = ".agents/rows/GOV-CORE.yaml"


@pytest.fixture
def repo(rowgate_repo: GitRepo) -> GitRepo:
    rowgate_repo.commit("States\n", {".agents/config.yaml": MINIMAL_CONFIG + STATES})
    return rowgate_repo


def _forked(fn, *args) -> tuple[int, str]:
    """Run `fn(*args)` (returning an exit code) in a forked child with stderr captured: a real second process
    without a second interpreter start. Returns (exit code, or minus the signal that killed it; stderr)."""
    err = tempfile.TemporaryFile()  # noqa: SIM115 (closed below, after the child has written it)
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 70
        try:
            os.dup2(err.fileno(), 2)
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            sys.stdout, sys.stderr = open(1, "w", closefd=False), open(2, "w", closefd=False)  # noqa: SIM115
            code = fn(*args)
        finally:
            with contextlib.suppress(BaseException):
                sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    err.seek(0)
    text = err.read().decode(errors="replace")
    err.close()
    return (os.waitstatus_to_exitcode(status), text)


def _rowgate(repo: GitRepo, *args: str) -> tuple[int, str]:
    return _forked(lambda: main([*args, "--repo", str(repo.path)]))


def _parallel(n: int, make_args) -> list[tuple[int, str]]:
    """`n` rowgate commands at once, each in its own process (forked, so they start together)."""
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda i: _rowgate(*make_args(i)), range(n)))


def test_twenty_concurrent_claims_leave_exactly_one(repo: GitRepo, monkeypatch):
    monkeypatch.setenv("ROWGATE_LOCK_TIMEOUT", "300")
    procs = _parallel(
        20, lambda i: (repo, "claim", "GOV-CORE", "--branch", f"b{i}", "--owner", f"o{i}", "--claim-id", f"C{i}")
    )
    assert sorted(rc for rc, _ in procs) == [0] + [1] * 19, procs
    assert all("GOV-CORE is already claimed" in err for rc, err in procs if rc)
    claims = sorted(p.name for p in (repo.path / ".agents/claims").iterdir())
    row = load_model(Row, repo.path / ROW)[0]
    assert claims == [f"{row.claim}.yaml"]
    assert not list((repo.path / ".agents").rglob("*.tmp")) and not (repo.path / ".agents/rowgate.lock").exists()


def test_twenty_concurrent_anchor_additions_keep_every_reported_success(repo: GitRepo, monkeypatch):
    monkeypatch.setenv("ROWGATE_LOCK_TIMEOUT", "300")
    repo.write({f"src/m{i}.py": "x\n" for i in range(20)})
    procs = _parallel(20, lambda i: (repo, "row", "set", "GOV-CORE", "--state", "READY", "--anchor", f"src/m{i}.py"))
    ok = {f"src/m{i}.py" for i, (rc, _) in enumerate(procs) if rc == 0}
    assert len(ok) == 20, procs
    assert set(load_model(Row, repo.path / ROW)[0].anchors) == ok


def test_a_held_lock_times_out_naming_its_holder(repo: GitRepo, monkeypatch):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (repo.path / ".agents/rowgate.lock").write_text(
            f"pid={holder.pid} host={os.uname().nodename} since=2026-01-01T00:00:00Z token=x\n"
        )
        monkeypatch.setenv("ROWGATE_LOCK_TIMEOUT", "0.2")
        rc, err = _rowgate(repo, "row", "set", "GOV-CORE", "--state", "READY")
    finally:
        holder.kill()
        holder.wait()
    lock = repo.path / ".agents/rowgate.lock"
    assert rc == 3
    assert err.splitlines() == [
        (
            f"rowgate: {lock} is held by pid {holder.pid} on {os.uname().nodename} since 2026-01-01T00:00:00Z "
            "(waited 0.2s)"
        ),
        f"    fix: wait for it to finish; if that process is gone, remove {lock}",
    ]


def _killed_at(limit: int, stop_at: str, argv: list[str], ignore_sigxfsz: bool = False) -> int:
    """In a child: run one record command that the kernel kills (SIGXFSZ) when its writes cross `limit`
    bytes, a kill -9 at that exact byte of the write, or that kills itself at the audit event `stop_at`
    (just before a rename, link or unlink). With `ignore_sigxfsz` the write fails with EFBIG instead."""

    def hook(event: str, _args: object) -> None:
        if event == stop_at:
            os.kill(os.getpid(), signal.SIGKILL)

    sys.addaudithook(hook)
    # Python ignores SIGXFSZ (a write past the limit fails with EFBIG); the default action kills.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN if ignore_sigxfsz else signal.SIG_DFL)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    return main(argv)


def test_a_kill_at_any_point_of_a_record_write_leaves_the_old_or_the_new_file(repo: GitRepo):
    repo.write({f"src/long_module_name_{i:03d}.py": "x\n" for i in range(60)})
    args = ["row", "set", "GOV-CORE", "--state", "READY"] + [
        a for i in range(60) for a in ("--anchor", f"src/long_module_name_{i:03d}.py")
    ]
    old = (repo.path / ROW).read_bytes()
    points = [(limit, "none") for limit in (0, 1, 40, 200, 700, 1500, 2500)] + [
        (1 << 30, event) for event in ("os.rename", "os.link", "os.remove")
    ]
    codes = set()
    for limit, event in points:
        rc, _ = _forked(_killed_at, limit, event, [*args, "--repo", str(repo.path)])
        assert rc in (0, -signal.SIGXFSZ, -signal.SIGKILL), (limit, event, rc)
        codes.add(rc)
        now = (repo.path / ROW).read_bytes()
        load_model(Row, repo.path / ROW)  # parses and validates
        assert now == old or rc == 0, (limit, event, now[:200])
        if now != old:  # the write completed before the kill point: restore and go on
            (repo.path / ROW).write_bytes(old)
    assert {-signal.SIGXFSZ, -signal.SIGKILL} <= codes  # killed mid-write and just before a rename/link
    assert main([*args, "--repo", str(repo.path)]) == 0  # a lock a killed writer left is broken
    assert len(load_model(Row, repo.path / ROW)[0].anchors) == 60


def test_a_file_size_limit_mid_write_changes_nothing_and_says_so(repo: GitRepo):
    anchor = "src/" + "a" * 200 + ".py"
    repo.write({anchor: "x\n"})
    old = (repo.path / ROW).read_bytes()
    rc, err = _forked(
        _killed_at,
        250,
        "none",
        ["row", "set", "GOV-CORE", "--state", "READY", "--anchor", anchor, "--repo", str(repo.path)],
        True,
    )
    assert (repo.path / ROW).read_bytes() == old
    assert rc == 3, err
    assert err.splitlines() == [f"rowgate: could not write {repo.path / ROW}: file too large; nothing was changed"]


def test_a_full_disk_rolls_back_a_claim(repo: GitRepo, monkeypatch, capsys):
    old = (repo.path / ROW).read_bytes()
    real_replace = os.replace

    def full(src, dst, *a, **kw):  # the claim file is created (link), then the row write fails
        if str(dst).endswith("GOV-CORE.yaml") and "/rows/" in str(dst):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
        return real_replace(src, dst, *a, **kw)

    monkeypatch.setattr(atomicio.os, "replace", full)
    assert main(["claim", "GOV-CORE", "--branch", "b", "--owner", "ada", "--repo", str(repo.path)]) == 3
    assert capsys.readouterr().err == (
        f"rowgate: could not write {repo.path / ROW}: no space left on device; nothing was changed\n"
    )
    assert (repo.path / ROW).read_bytes() == old
    assert not list((repo.path / ".agents/claims").iterdir())  # the claim was rolled back
    assert not list((repo.path / ".agents").rglob("*.tmp"))
    monkeypatch.undo()
    assert main(["claim", "GOV-CORE", "--branch", "b", "--owner", "ada", "--repo", str(repo.path)]) == 0


def test_an_orphan_claim_does_not_block_claiming_and_is_cleaned(repo: GitRepo, capsys):
    repo.write(
        {".agents/claims/GOV-CORE.yaml": "id: GOV-CORE\nrow: GOV-CORE\nbranch: b\nowner: o\nsince: 2026-01-01\n"}
    )
    assert (
        main(["claim", "GOV-CORE", "--branch", "b2", "--owner", "ada", "--claim-id", "C2", "--repo", str(repo.path)])
        == 0
    )
    assert "removed orphan claim .agents/claims/GOV-CORE.yaml" in capsys.readouterr().err
    assert sorted(p.name for p in (repo.path / ".agents/claims").iterdir()) == ["C2.yaml"]
    repo.write({".agents/claims/OLD.yaml": "id: OLD\nrow: GOV-CORE\nbranch: b\nowner: o\nsince: 2026-01-01\n"})
    assert main(["row", "set", "GOV-CORE", "--state", "READY", "--repo", str(repo.path)]) == 0
    assert not list((repo.path / ".agents/claims").iterdir())


@pytest.mark.parametrize("title", ["two\nlines", "bell\x07", "   "])
def test_row_new_refuses_odd_titles_in_one_line(repo: GitRepo, capsys, title):
    assert main(["row", "new", "GOV-ODD", "--area", "GOV", "--title", title, "--repo", str(repo.path)]) == 2
    assert capsys.readouterr().err.startswith("rowgate: title ")
    assert not (repo.path / ".agents/rows/GOV-ODD.yaml").exists()


def test_row_new_refuses_an_id_with_a_trailing_newline(repo: GitRepo, capsys):
    assert main(["row", "new", "GOV-ODD\n", "--area", "GOV", "--title", "t", "--repo", str(repo.path)]) == 2
    assert not list((repo.path / ".agents/rows").glob("GOV-ODD*"))


def test_atomic_write_keeps_the_old_file_on_enospc(tmp_path: Path, monkeypatch):
    target = tmp_path / "x.yaml"
    target.write_text("old\n")

    def enospc(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomicio.os, "write", enospc)
    with pytest.raises(OSError):
        atomicio.write_atomic(target, "new\n" * 1000)
    assert target.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["x.yaml"]


def test_stale_lock_of_a_dead_process_is_broken(tmp_path: Path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / "rowgate.lock").write_text(f"pid={dead.pid} host={os.uname().nodename} since=x token=y\n")
    with atomicio.records_lock(tmp_path, timeout_s=0):
        assert "token=" in (tmp_path / "rowgate.lock").read_text()
    assert not (tmp_path / "rowgate.lock").exists()


def test_a_kill_at_any_point_of_a_render_leaves_each_view_old_or_new(repo: GitRepo):
    from checkers.config import load_config
    from checkers.records import load_records
    from checkers.render import load_views

    rows = {f".agents/rows/GOV-R{i:02d}.yaml": row_yaml(f"GOV-R{i:02d}") for i in range(30)}
    repo.write({**rows, "engine/flags.py": 'declare("VT_A", False, "GOV-CORE", "a")\n'})
    assert main(["render", "--repo", str(repo.path)]) == 0
    repo.write({p: t.replace('title: "Row', 'title: "Renamed row') for p, t in rows.items()})
    repo.write({"engine/flags.py": 'declare("VT_A", False, "GOV-CORE", "a")\ndeclare("VT_B", 1, "GOV-CORE", "b")\n'})
    new = load_views(repo.path, load_records(repo.path), load_config(repo.path))
    old = {rel: (repo.path / rel).read_text() for rel in new}
    assert all(old[rel] != new[rel] for rel in new if rel != "docs/matrices/ENGINE.md")
    points = [(limit, "none") for limit in (0, 1, 100, 400, 1000, 2000)] + [(1 << 30, "os.rename")]
    codes = set()
    for limit, event in points:
        rc, _ = _forked(_killed_at, limit, event, ["render", "--repo", str(repo.path)])
        assert rc in (0, -signal.SIGXFSZ, -signal.SIGKILL), (limit, event, rc)
        codes.add(rc)
        for rel in new:
            assert (repo.path / rel).read_text() in (old[rel], new[rel]), (limit, event, rel)
            (repo.path / rel).write_text(old[rel])
    assert {-signal.SIGXFSZ, -signal.SIGKILL} <= codes
    assert main(["render", "--repo", str(repo.path)]) == 0  # the lock the killed renders left is broken
    assert {rel: (repo.path / rel).read_text() for rel in new} == new


def test_render_waits_for_the_records_lock(repo: GitRepo, monkeypatch):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (repo.path / ".agents/rowgate.lock").write_text(
            f"pid={holder.pid} host={os.uname().nodename} since=2026-01-01T00:00:00Z token=x\n"
        )
        monkeypatch.setenv("ROWGATE_LOCK_TIMEOUT", "0.2")
        rc, err = _rowgate(repo, "render")
    finally:
        holder.kill()
        holder.wait()
    assert rc == 3
    assert err.splitlines()[0].startswith(f"rowgate: {repo.path / '.agents/rowgate.lock'} is held by pid {holder.pid}")
    assert not (repo.path / "docs/ROADMAP.md").exists()
