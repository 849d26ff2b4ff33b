"""scripts/bench/gpu_bisect.sh: one command at several commits in one device call. On the CPU: `prepare` archives
each commit's engine/, lab/, checkers/ and tests/ in the order given and refuses what is not a commit; `run` runs the command inside
each archive (its own code, not the checkout's), in that order or on the commits named, into one file of $OUT."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench" / "gpu_bisect.sh"


def sh(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_prepare_then_run_each_commit_in_its_own_archive(tmp_path: Path) -> None:
    env = {"BISECT": str(tmp_path / "b"), "OUT": str(tmp_path / "out"), "WHEELS": str(tmp_path / "none")}
    head, parent = (subprocess.run(["git", "rev-parse", "--short=9", c], cwd=ROOT, capture_output=True, text=True,
                                   check=True).stdout.strip() for c in ("HEAD", "HEAD~1"))  # fmt: skip
    made = sh("prepare", "HEAD~1", "HEAD", env=env)
    assert made.returncode == 0, made.stderr
    order = (tmp_path / "b" / "ORDER").read_text().splitlines()
    assert [ln.split()[0] for ln in order] == [parent, head]  # the order given, not history's
    with tarfile.open(tmp_path / "b" / f"{head}.tar.gz") as archive:
        tops = {name.split("/")[0] for name in archive.getnames()}
        assert "engine/__init__.py" in archive.getnames() and "tests/conftest.py" in archive.getnames()
    assert tops == {"engine", "lab", "checkers", "tests", "pyproject.toml"}  # the code and its tests, not the docs
    (tmp_path / "out").mkdir()
    ran = sh("run", "--", "python3", "-c", "import engine, os; print(engine.__file__); print(os.environ['VT_CUDA_CACHE'])",
             env=env)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    text = (tmp_path / "out" / "bisect.txt").read_text()
    sections = text.split("== ")[1:]
    assert [s.split()[0] for s in sections] == [parent, head]
    for sha, section in zip((parent, head), sections, strict=True):
        assert "rc=0" in section.splitlines()[0]
        assert f"{tmp_path}/b/trees/{sha}/engine/__init__.py" in section  # the archive's engine, not the checkout's
        assert section.splitlines()[-1] == "/tmp/bisect-cache"  # one cache: objects are named by their sources' hash


def test_a_failing_command_is_reported_and_the_next_commit_still_runs(tmp_path: Path) -> None:
    env = {"BISECT": str(tmp_path / "b"), "OUT": str(tmp_path), "WHEELS": str(tmp_path / "none"), "LIMIT": "5"}
    assert sh("prepare", "HEAD", "HEAD~1", env=env).returncode == 0
    ran = sh("run", "--", "python3", "-c", "raise SystemExit(3)", env=env)
    text = (tmp_path / "bisect.txt").read_text()
    assert ran.returncode == 0 and text.count("rc=3 in") == 2, text


def test_run_on_named_commits_appends_each_ab_to_one_report(tmp_path: Path) -> None:
    env = {"BISECT": str(tmp_path / "b"), "OUT": str(tmp_path), "WHEELS": str(tmp_path / "none"), "LIMIT": "5"}
    head, parent = (subprocess.run(["git", "rev-parse", "--short=9", c], cwd=ROOT, capture_output=True, text=True,
                                   check=True).stdout.strip() for c in ("HEAD", "HEAD~1"))  # fmt: skip
    assert sh("prepare", "HEAD~1", "HEAD", env=env).returncode == 0
    assert sh("run", "HEAD", "--", "echo", "first", env=env).returncode == 0  # by the name it was prepared as
    assert sh("run", parent[:7], head, "--", "echo", "second", env=env).returncode == 0  # by sha, in the order named
    runs = (tmp_path / "bisect.txt").read_text().split("## ")[1:]
    assert [r.splitlines()[0] for r in runs] == ["echo first", "echo second"]
    assert [s.split()[0] for s in runs[0].split("== ")[1:]] == [head]
    assert [s.split()[0] for s in runs[1].split("== ")[1:]] == [parent, head]
    refused = sh("run", "variant/none", "--", "true", env=env)
    assert refused.returncode == 1 and "variant/none: not among the prepared commits" in refused.stderr


@pytest.mark.parametrize(
    "args, message",
    [(("prepare", "no-such-ref"), "no-such-ref: not a commit"), (("run", "--", "true"), "run prepare first"),
     (("bisect",), "usage:"), (("prepare", "HEAD"), "BISECT=.: not a folder to replace")],
)  # fmt: skip
def test_what_it_cannot_do_is_refused_with_the_reason(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    where = "." if "BISECT=." in message else str(tmp_path / "b")  # the checkout itself (rm refuses "." anyway)
    run = sh(*args, env={"BISECT": where, "OUT": str(tmp_path)})
    assert run.returncode != 0 and message in run.stderr, run.stderr


NEW_FILE_PATCH = """\
diff --git a/engine/_variant_mark.py b/engine/_variant_mark.py
new file mode 100644
--- /dev/null
+++ b/engine/_variant_mark.py
@@ -0,0 +1 @@
+MARK = "patched"
"""
STALE_PATCH = """\
diff --git a/pyproject.toml b/pyproject.toml
--- a/pyproject.toml
+++ b/pyproject.toml
@@ -1 +1 @@
-a first line pyproject.toml does not have
+anything
"""


def test_a_patch_is_prepared_as_head_with_the_patch_applied(tmp_path: Path) -> None:
    """A variant kept as a patch file runs as HEAD plus the patch, beside HEAD; one that no longer applies is refused
    here, before a device call is spent on it."""
    env = {"BISECT": str(tmp_path / "b"), "OUT": str(tmp_path), "WHEELS": str(tmp_path / "none"), "LIMIT": "20"}
    (tmp_path / "mark.patch").write_text(NEW_FILE_PATCH)
    made = sh("prepare", "HEAD", str(tmp_path / "mark.patch"), env=env)
    assert made.returncode == 0, made.stderr
    head = subprocess.run(["git", "rev-parse", "--short=9", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip
    assert (tmp_path / "b" / "NAMES").read_text().splitlines() == [f"{head} HEAD", f"{head}+mark mark"]
    ran = sh("run", "--", "python3", "-c", "import engine._variant_mark as m; print(m.MARK)", env=env)
    assert ran.returncode == 0, ran.stderr
    base, patched = (tmp_path / "bisect.txt").read_text().split("== ")[1:]
    assert "rc=1" in base.splitlines()[0] and "ModuleNotFoundError" in base  # HEAD alone has no such module
    assert "rc=0" in patched.splitlines()[0] and patched.splitlines()[-1] == "patched"
    (tmp_path / "stale.patch").write_text(STALE_PATCH)
    refused = sh("prepare", "HEAD", str(tmp_path / "stale.patch"), env=env)
    assert refused.returncode == 1 and "stale.patch: does not apply onto HEAD" in refused.stderr
    missing = sh("prepare", str(tmp_path / "none.patch"), env=env)
    assert missing.returncode == 1 and "none.patch: no such patch file" in missing.stderr
