"""An upstream repository and a contributor's fork clone, built with real git, for the outside-contribution
tests (test_baseline, the pending path of test_role_discipline_pending).

upstream main:  U0 (layout) - U1 (breaks env-doc: VT_NEW read, undocumented) - U2 - U3 (documents VT_NEW)
                - U4; the contributor's branch `contrib` starts at U1 in a clone whose `origin` is a stale
fork (main at U0... U1) and whose `upstream` is the original, fetched at U4, and adds C1, which breaks
agent-record (a row anchor to a file that does not exist) and names its issue with `Refs #1`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import GIT_ENV, ROOT, GitRepo, init_repo, row_yaml

__all__ = ["Contrib", "build", "row_yaml", "rowgate"]

CONFIG = """\
version: 1
rows:
  areas: [GOV]
env_doc:
  doc: docs/ENV.md
  allowlist: env-allow.txt
  flags_file: null
checks:
  doc-checkpoint: {enabled: false}
  evidence: {enabled: false}
  gemv-invocation: {enabled: false}
  gencode: {enabled: false}
  pr-size: {enabled: false}
  commit-trailers: {enabled: false}
"""
ENV_DOC = "| flag | description |\n|---|---|\n| `VT_OK` | fine |\n"
SPEC = "# GOV-CORE\n\n## Goal\nx\n\n## Acceptance\ny\n\n## Issues\n- #1\n"
ISSUE = "---\nnumber: 1\nrow: GOV-CORE\nfiled: 2026-01-01\n---\n# Intake of issue #1\n"


class Contrib:
    def __init__(self, upstream: GitRepo, clone: GitRepo, shas: dict[str, str]):
        self.upstream, self.clone, self.shas = upstream, clone, shas


def build(tmp: Path) -> Contrib:
    up = init_repo(tmp / "upstream")
    shas = {}
    shas["U0"] = up.commit(
        "Layout\n\nRow: GOV-CORE\n",
        {
            ".agents/config.yaml": CONFIG,
            ".agents/rows/GOV-CORE.yaml": row_yaml("GOV-CORE", issues="[1]"),
            ".agents/specs/GOV-CORE.md": SPEC,
            ".agents/issues/GOV-CORE/ISSUE-1.md": ISSUE,
            "docs/ENV.md": ENV_DOC,
            "src/ok.py": 'import os\nos.environ.get("VT_OK")\n',
        },
    )
    shas["U1"] = up.commit("Read VT_NEW\n\nRow: GOV-CORE\n", {"src/new.py": 'import os\nos.environ.get("VT_NEW")\n'})
    fork = tmp / "fork.git"
    up.git("clone", "-q", "--bare", str(up.path), str(fork))
    clone = GitRepo(tmp / "clone")
    subprocess.run(["git", "clone", "-q", str(fork), str(clone.path)], env=clone.env, check=True, timeout=60)
    clone.git("config", "commit.gpgsign", "false")
    clone.git("config", "core.hooksPath", "/dev/null")
    clone.git("remote", "add", "upstream", str(up.path))
    shas["U2"] = up.commit("Unrelated\n\nRow: GOV-CORE\n", {"README.md": "readme\n"})
    shas["U3"] = up.commit("Document VT_NEW\n\nRow: GOV-CORE\n", {"docs/ENV.md": ENV_DOC + "| `VT_NEW` | new |\n"})
    shas["U4"] = up.commit("Unrelated again\n\nRow: GOV-CORE\n", {"README.md": "readme 2\n"})
    clone.git("fetch", "-q", "upstream")
    clone.git("checkout", "-q", "-b", "contrib")
    clone._tick = 100
    shas["C1"] = clone.commit(
        "Anchor the row to its code\n\nRefs #1\n",
        {".agents/rows/GOV-CORE.yaml": row_yaml("GOV-CORE", issues="[1]", anchors="[src/missing.py]")},
    )
    return Contrib(up, clone, shas)


def rowgate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "checkers", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin:/usr/local/bin", **GIT_ENV},
    )
