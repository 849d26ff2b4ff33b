"""The README's "Use it in your repository" works as printed: its config example validates, and its hooks
snippet, pointed at a clone of this checkout at HEAD, runs each hook id through `pre-commit try-repo` in a
scratch repository set up by the README's commands (commit-msg, pre-push and manual stages).

pre-commit installs this package (language: python) with pip from the clone; where the machine has a local
package index, pip is pointed at it so no network is used.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from checkers.config import parse_config
from tests.conftest import GIT_ENV, ROOT, init_repo

PRE_COMMIT = Path(sys.executable).with_name("pre-commit")
LOCAL_INDEX = Path("/opt/pypi/simple")
SIGNED = "\n\nSigned-off-by: Ada Tester <ada@example.com>\n"
PLACEHOLDER = "/path/to/rowgate"  # the snippet's repo:, which the reader replaces by their clone's path or URL


def section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("### Use it in your repository")
    return text[start : text.index("\n## ", start)]


def yaml_blocks() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", section(), re.DOTALL)


def test_the_config_example_validates():
    config = parse_config(yaml_blocks()[0].encode(), "README.md")
    assert config.trailers.presets == ["dco"] and not config.checks["gencode"].enabled


def test_the_snippet_names_real_hooks_and_a_real_revision():
    [repo] = YAML(typ="safe").load(yaml_blocks()[1])["repos"]
    hooks = {h["id"] for h in YAML(typ="safe").load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    assert {h["id"] for h in repo["hooks"]} <= hooks
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert repo["rev"] == f"v{version}"  # the release tag of this version (docs/RELEASING.md), never a branch
    assert repo["repo"] == PLACEHOLDER  # no invented URL: the reader's own clone (or the URL they cloned from)


@pytest.mark.slow
def test_each_hook_of_the_readme_snippet_through_pre_commit_try_repo(tmp_path: Path):
    if not PRE_COMMIT.exists() and shutil.which("pre-commit") is None:
        pytest.skip("pre-commit is not installed: pip install -e .[dev]")
    env = {
        **os.environ,
        **GIT_ENV,
        "PRE_COMMIT_HOME": str(tmp_path / "cache"),
        "PIP_NO_BUILD_ISOLATION": "false",
    }  # build with the environment's setuptools: no download
    if LOCAL_INDEX.is_dir():
        env["PIP_INDEX_URL"] = LOCAL_INDEX.as_uri()
    clone = tmp_path / "rowgate"
    subprocess.run(
        ["git", "clone", "-q", "--no-local", str(ROOT), str(clone)],
        check=True,
        timeout=120,
        capture_output=True,
        env=env,
    )
    [snippet] = YAML(typ="safe").load(yaml_blocks()[1])["repos"]
    rev = snippet["rev"]
    # the release tag as docs/RELEASING.md cuts it (annotated), on the clone's HEAD: the tag of this version
    # may not exist yet, and the commit under test is this one
    subprocess.run(
        ["git", "-C", str(clone), "tag", "-f", "-a", rev, "-m", f"rowgate {rev}", "HEAD"],
        check=True,
        capture_output=True,
        env=env,
    )

    # the scratch repository: signed-off history, a remote, then the README's commands
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    repo = init_repo(tmp_path / "scratch")
    for i in range(3):
        repo.commit(f"Change {i}{SIGNED}", {f"src/m{i}.py": f"x = {i}\n"})
    repo.git("remote", "add", "origin", str(remote))
    repo.git("push", "-q", "origin", "main")
    repo.git("remote", "set-head", "origin", "main")

    def rowgate(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "checkers", *args],
            cwd=repo.path,
            capture_output=True,
            text=True,
            env={**env, "PYTHONPATH": str(ROOT)},
            stdin=subprocess.DEVNULL,
            timeout=120,
            check=False,
        )

    dco = rowgate("check", "commit-trailers", "--preset", "dco", "--range", "origin/main~2..HEAD")
    assert dco.returncode == 0, dco.stdout + dco.stderr
    assert rowgate("init").returncode == 0
    repo.git("checkout", "-q", "-b", "feature")
    repo.commit("Add the rowgate config" + SIGNED)
    pre = rowgate("preflight")
    assert pre.returncode == 0 and pre.stdout.splitlines()[-1].startswith("All gates green"), pre.stdout
    (tmp_path / "signed").write_text("Add the widget\n\nSigned-off-by: Ada Tester <ada@example.com>\n")
    (tmp_path / "unsigned").write_text("Add the widget\n")
    exe = str(PRE_COMMIT) if PRE_COMMIT.exists() else "pre-commit"

    def hook(hook_id: str, *stage: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [exe, "try-repo", str(clone), hook_id, "--ref", rev, *stage],
            cwd=repo.path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )

    # the snippet as printed, with the reader's clone in place of the placeholder, through `pre-commit run`
    config = yaml_blocks()[1]
    assert config.count(PLACEHOLDER) == 1
    (repo.path / ".pre-commit-config.yaml").write_text(config.replace(PLACEHOLDER, str(clone)))

    def run_hook(hook_id: str, message: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [exe, "run", hook_id, "--hook-stage", "commit-msg", "--commit-msg-filename", str(message)],
            cwd=repo.path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )

    good = run_hook("rowgate-commit-trailers", tmp_path / "signed")
    assert good.returncode == 0 and "Passed" in good.stdout, good.stdout + good.stderr
    bad = run_hook("rowgate-commit-trailers", tmp_path / "unsigned")
    assert bad.returncode == 1 and "TR001 trailer-missing: no Signed-off-by trailer" in bad.stdout, bad.stdout
    (repo.path / ".pre-commit-config.yaml").unlink()  # try-repo below runs in a tree without it

    ran = []
    for h in snippet["hooks"]:
        if h["id"] == "rowgate-commit-trailers":
            good = hook(h["id"], "--hook-stage", "commit-msg", "--commit-msg-filename", str(tmp_path / "signed"))
            assert good.returncode == 0 and "Passed" in good.stdout, good.stdout + good.stderr
            bad = hook(h["id"], "--hook-stage", "commit-msg", "--commit-msg-filename", str(tmp_path / "unsigned"))
            assert bad.returncode == 1, bad.stdout + bad.stderr
            assert "TR001 trailer-missing: no Signed-off-by trailer (need at least 1)" in bad.stdout
            assert (
                "fix: commit again with git commit -s, which adds `Signed-off-by: Ada Tester <ada@example.com>`"
                in bad.stdout
                and "--amend" not in bad.stdout
            )
        elif h["id"] == "rowgate-pr-size":
            push = hook(
                h["id"], "--hook-stage", "pre-push", "--from-ref", repo.head("origin/main"), "--to-ref", repo.head()
            )
            assert push.returncode == 0 and "Passed" in push.stdout, push.stdout + push.stderr
        elif h["id"] == "rowgate-gencode":
            manual = hook(h["id"], "--hook-stage", "manual")  # disabled by init here: a skip, exit 0
            assert manual.returncode == 0 and "Passed" in manual.stdout, manual.stdout + manual.stderr
        ran.append(h["id"])
    assert ran == ["rowgate-commit-trailers", "rowgate-pr-size", "rowgate-gencode"]
