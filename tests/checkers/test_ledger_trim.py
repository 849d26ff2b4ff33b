"""scripts/ledger-trim.py: a record over the cap loses its per-case arrays but keeps what documents cite from it,
says what it dropped and how to get the original back, and then passes agent-record and evidence."""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

from checkers.checks import evidence
from checkers.checks.records import agent_record
from checkers.config import load_config
from checkers.context import Context
from tests.conftest import MINIMAL_CONFIG, ROOT, GitRepo

SCRIPT = ROOT / "scripts" / "ledger-trim.py"
NAME = "2026-12-05-numerics"
REL = f".agents/ledger/{NAME}.json"


def _case(i: int, arm: str) -> dict[str, object]:
    return {"name": f"attn/{arm}/case{i}", "arm": arm, "max_abs": 0.001 * (i + 1), "verdict": "pass", "pad": "x" * 60}


def _big() -> dict[str, object]:
    cases = [_case(i, "warp" if i % 3 else "tiled") for i in range(120)]
    cases[57]["max_abs"] = 0.731  # the one case a document cites
    return {
        "schema": 1,
        "date": "2026-12-05",
        "kind": "gate",
        "rows": ["GOV-CORE"],
        "command": "python -m lab gate kernels",
        "summary": "120/120 cases within tolerance",
        "results": {"arms": {"warp": {"cases": 80}, "tiled": {"cases": 40}}, "cases": cases},
    }


def _trim(repo: GitRepo, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(SCRIPT), "--root", str(repo.path), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def test_a_big_record_is_trimmed_keeping_what_documents_cite(rowgate_repo: GitRepo, tmp_path: Path):
    raw = (json.dumps(_big(), indent=1) + "\n").encode()
    rowgate_repo.commit(
        "Big record",
        {
            REL: raw.decode(),
            "README.md": f"The worst case was 0.731 [ledger: {NAME} @ 2026-12-05 no-sha].\n",
            ".agents/config.yaml": MINIMAL_CONFIG + "evidence:\n  documents: [README.md]\n",
        },
    )
    blob = rowgate_repo.git("hash-object", REL).strip()
    out = _trim(rowgate_repo, "--out", str(tmp_path / "dropped"))
    assert out.returncode == 0, out.stderr
    size = (rowgate_repo.path / REL).stat().st_size
    assert out.stdout == f"{REL}: {len(raw)} -> {size} bytes (results.cases 1/120 kept)\n"
    data = json.loads((rowgate_repo.path / REL).read_text())
    assert size <= 8192
    assert [c["max_abs"] for c in data["results"]["cases"]] == [0.731]
    assert data["results"]["arms"] == {"warp": {"cases": 80}, "tiled": {"cases": 40}}
    assert data["trimmed"] == {
        "bytes": len(raw),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "git_blob": blob,
        "commit": rowgate_repo.head(),
        "by": "scripts/ledger-trim.py",
        "dropped": [
            {
                "path": "results.cases",
                "entries": 120,
                "kept": 1,
                "counts": {"tiled": {"pass": 40}, "warp": {"pass": 80}},
            }
        ],
    }
    assert rowgate_repo.git("cat-file", "-p", blob).encode() == raw  # history gives the original back
    assert len(json.loads((tmp_path / "dropped" / f"{NAME}.dropped.json").read_text())["results.cases"]) == 119
    ctx = Context(root=rowgate_repo.path, config=load_config(rowgate_repo.path), env={})
    args = argparse.Namespace(base=None, head=None, message_file=None)
    assert agent_record.run(ctx, args).findings == []
    result = evidence.run(ctx, argparse.Namespace())
    assert (result.status.value, result.findings) == ("pass", [])


def test_a_record_history_does_not_hold_is_left_as_it_was(rowgate_repo: GitRepo):
    text = json.dumps(_big(), indent=1) + "\n"
    rowgate_repo.write({REL: text})  # not committed: trimming it would lose the original
    out = _trim(rowgate_repo)
    assert out.returncode == 1
    assert out.stderr.endswith(
        f"{NAME}.json: left as it was: not committed as it is: commit it first, so history holds the original\n"
    )
    assert (rowgate_repo.path / REL).read_text() == text


def test_dropped_entries_are_not_written_into_the_repository(rowgate_repo: GitRepo):
    out = _trim(rowgate_repo, "--out", str(rowgate_repo.path / "dropped"))
    assert out.returncode == 2 and "is inside the repository" in out.stderr


def test_decimals_printed_beside_a_file_name_reference_are_kept_too(rowgate_repo: GitRepo):
    big = _big()
    big["results"]["cases"][90]["max_abs"] = 0.417  # printed near the record's file name, no marker
    rowgate_repo.commit(
        "Big record",
        {
            REL: json.dumps(big, indent=1) + "\n",
            "README.md": f"The worst tiled case, 0.417, is in `{NAME}.json`.\n",
            ".agents/config.yaml": MINIMAL_CONFIG + "evidence:\n  documents: [README.md]\n",
        },
    )
    assert _trim(rowgate_repo).returncode == 0
    data = json.loads((rowgate_repo.path / REL).read_text())
    assert [c["max_abs"] for c in data["results"]["cases"]] == [0.417]


def test_a_record_that_cannot_fit_is_left_as_it_was(rowgate_repo: GitRepo):
    big = _big()
    big["summary"] = "s" * 9000  # no per-case array holds the bulk
    text = json.dumps(big, indent=1) + "\n"
    rowgate_repo.commit("Big record", {REL: text})
    out = _trim(rowgate_repo)
    assert out.returncode == 1
    emptied = len((json.dumps({**big, "results": {**big["results"], "cases": []}}, indent=1) + "\n").encode())
    path = rowgate_repo.path / REL
    assert out.stderr == f"{path}: left as it was: {emptied} bytes with every per-case array trimmed\n"
    assert (rowgate_repo.path / REL).read_text() == text
