"""A governance-only install: the wheel built from a clone at HEAD holds the toolkit and its console
script, and neither the engine package nor model weights."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import GIT_ENV, ROOT


@pytest.mark.slow
def test_the_wheel_is_the_toolkit_without_the_engine_or_weights(tmp_path: Path):
    env = {**os.environ, **GIT_ENV}
    clone = tmp_path / "src"
    subprocess.run(
        ["git", "clone", "-q", "--no-local", str(ROOT), str(clone)],
        check=True,
        timeout=120,
        capture_output=True,
        env=env,
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            str(clone),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [wheel] = (tmp_path / "dist").glob("rowgate-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith((".dist-info", ".data"))}
    assert tops == {"checkers"}, tops
    assert "checkers/commands/init.py" in names and "checkers/config.py" in names
    assert not [n for n in names if n.endswith((".safetensors", ".cu", ".pt", ".bin"))]
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "rowgate = checkers.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()
