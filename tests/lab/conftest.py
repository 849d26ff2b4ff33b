"""The lab's tests share the engine tests' tiny checkpoints (one definition, in tests/engine/conftest.py) and a
one-commit git checkout for the ledger writer's provenance."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.engine.conftest import tiny_checkpoint, tiny_model_dir

__all__ = ["checkout", "git", "tiny_checkpoint", "tiny_model_dir"]


def git(root: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false", *args],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A repository of one commit (kernel.py): a clean tree a record can name."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    (root / "kernel.py").write_text("x = 1\n")
    git(root, "add", "kernel.py")
    git(root, "commit", "-q", "-m", "first")
    return root
