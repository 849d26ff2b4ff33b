"""The rowgate-commit-trailers hook works from another repository through `pre-commit try-repo`.

pre-commit installs this package (language: python) into its own environment with pip, from this
checkout's HEAD; where the machine has a local package index, pip is pointed at it so no network is used.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import GIT_ENV, ROOT, init_repo, row_yaml

PRE_COMMIT = Path(sys.executable).with_name("pre-commit")
LOCAL_INDEX = Path("/opt/pypi/simple")


@pytest.mark.slow
def test_commit_msg_hook_through_pre_commit_try_repo(tmp_path: Path):
    if not PRE_COMMIT.exists() and shutil.which("pre-commit") is None:
        pytest.skip("pre-commit is not installed: pip install -e .[dev]")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    clone = tmp_path / "rowgate"
    subprocess.run(
        ["git", "clone", "-q", "--no-local", str(ROOT), str(clone)],
        check=True,
        timeout=120,
        capture_output=True,
        env={**os.environ, **GIT_ENV},
    )
    other = init_repo(tmp_path / "other")
    other.write(
        {
            ".agents/config.yaml": "version: 1\nrows:\n  areas: [GOV]\ntrailers:\n  presets: [row]\n",
            ".agents/rows/GOV-CORE.yaml": row_yaml("GOV-CORE"),
        }
    )
    (tmp_path / "good").write_text("Add the widget\n\nRow: GOV-CORE\n")
    (tmp_path / "bad").write_text("Add the widget\n\nRow: <ROW-ID>\n")
    env = {
        **os.environ,
        **GIT_ENV,
        "PRE_COMMIT_HOME": str(tmp_path / "cache"),
        "PIP_NO_BUILD_ISOLATION": "false",
    }  # build with the environment's setuptools: no download
    if LOCAL_INDEX.is_dir():
        env["PIP_INDEX_URL"] = LOCAL_INDEX.as_uri()
    exe = str(PRE_COMMIT) if PRE_COMMIT.exists() else "pre-commit"

    def hook(message: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                exe,
                "try-repo",
                str(clone),
                "rowgate-commit-trailers",
                "--ref",
                head,
                "--hook-stage",
                "commit-msg",
                "--commit-msg-filename",
                str(tmp_path / message),
            ],
            cwd=other.path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    good = hook("good")
    assert good.returncode == 0 and "rowgate commit-trailers" in good.stdout and "Passed" in good.stdout, (
        good.stdout + good.stderr
    )
    bad = hook("bad")  # the hook runs with --filled: the template placeholder is refused
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "bad: TR012 trailer-placeholder: Row: <ROW-ID> is the template placeholder\n" in bad.stdout
