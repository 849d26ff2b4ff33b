"""Shared fixtures: isolated temporary git repositories (pinned author, no global or system config,
no signing, no hooks), and a minimal rowgate repository layout."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "Ada Tester",
    "GIT_AUTHOR_EMAIL": "ada@example.com",
    "GIT_COMMITTER_NAME": "Ada Tester",
    "GIT_COMMITTER_EMAIL": "ada@example.com",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_TERMINAL_PROMPT": "0",
    "LC_ALL": "C",
}


class GitRepo:
    """A real repository in a temporary directory, driven through the git CLI."""

    def __init__(self, path: Path):
        self.path = path
        self.env = {**os.environ, **GIT_ENV}
        self._tick = 0

    def git(self, *args: str, input: str | None = None, check: bool = True) -> str:
        proc = subprocess.run(
            ["git", *args], cwd=self.path, env=self.env, input=input, text=True, capture_output=True, timeout=60
        )
        if check and proc.returncode:
            raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr}")
        return proc.stdout

    def write(self, files: dict[str, str | bytes]) -> None:
        for rel, content in files.items():
            p = self.path / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                p.write_bytes(content)
            else:
                p.write_text(content)

    def commit(
        self, message: str, files: dict[str, str | bytes] | None = None, author: tuple[str, str] | None = None
    ) -> str:
        """Write files, stage everything and commit; each commit gets a later timestamp. Returns the sha."""
        if files:
            self.write(files)
        self.git("add", "-A")
        self._tick += 1
        env = dict(self.env)
        stamp = f"2026-01-01T00:{self._tick // 60:02d}:{self._tick % 60:02d}+00:00"
        env.update(GIT_AUTHOR_DATE=stamp, GIT_COMMITTER_DATE=stamp)
        if author:
            env.update(GIT_AUTHOR_NAME=author[0], GIT_AUTHOR_EMAIL=author[1])
        proc = subprocess.run(
            ["git", "commit", "-q", "--allow-empty", "--no-verify", "-F", "-"],
            cwd=self.path,
            env=env,
            input=message,
            text=True,
            capture_output=True,
            timeout=60,
        )
        if proc.returncode:
            raise AssertionError(f"git commit failed: {proc.stderr}")
        return self.head()

    def head(self, ref: str = "HEAD") -> str:
        return self.git("rev-parse", ref).strip()


def init_repo(path: Path, branch: str = "main") -> GitRepo:
    path.mkdir(parents=True, exist_ok=True)
    repo = GitRepo(path)
    repo.git("init", "-q", "-b", branch)
    repo.git("config", "commit.gpgsign", "false")
    repo.git("config", "core.hooksPath", "/dev/null")
    return repo


MINIMAL_CONFIG = """\
version: 1
rows:
  areas: [GOV, ENGINE]
"""


def row_yaml(row_id: str, area: str = "GOV", state: str = "READY", **extra: str) -> str:
    lines = [
        f"id: {row_id}",
        f"area: {area}",
        f'title: "Row {row_id}"',
        f"state: {state}",
        f"spec: .agents/specs/{row_id}.md",
    ]
    lines += [f"{k}: {v}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


@pytest.fixture
def git_repo(tmp_path: Path) -> GitRepo:
    return init_repo(tmp_path / "repo")


@pytest.fixture
def rowgate_repo(tmp_path: Path) -> GitRepo:
    """A repository with a valid minimal `.agents/` layout and one commit."""
    repo = init_repo(tmp_path / "repo")
    repo.commit(
        "Initial layout",
        {
            ".agents/config.yaml": MINIMAL_CONFIG,
            ".agents/rows/GOV-CORE.yaml": row_yaml("GOV-CORE"),
            ".agents/specs/GOV-CORE.md": "# GOV-CORE\n\n## Goal\nx\n\n## Acceptance\ny\n\n## Issues\n- #1\n",
        },
    )
    return repo


def stage(root: Path) -> GitRepo:
    """Make `root` a repository (if it is not one) whose index holds every file under it: checks list the
    repository's files from git (Context.files), so a tree written by a test is staged before it is checked."""
    repo = GitRepo(root) if (root / ".git").exists() else init_repo(root)
    repo.git("add", "-A")
    return repo
