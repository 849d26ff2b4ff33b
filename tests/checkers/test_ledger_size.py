"""agent-record AR009 (checkers/checks/records/ledger_size.py): a ledger record file over
record.ledger_size_cap fails, naming the file, its size and the cap; a reviewed exemption lets one through,
and an exemption no longer needed fails."""

from __future__ import annotations

import argparse
import json

import pytest

from checkers.checks.records import agent_record
from checkers.config import json_schema, load_config
from checkers.context import Context
from checkers.ledger_schema import SIZE_CAP
from tests.conftest import MINIMAL_CONFIG, GitRepo

BIG = ".agents/ledger/2026-12-05-big.json"
SMALL = ".agents/ledger/2026-12-05-small.json"
TRIMMED = {
    "bytes": 124853,
    "sha256": "f" * 64,
    "git_blob": "5" * 40,
    "commit": "8" * 40,
    "by": "scripts/ledger-trim.py",
    "dropped": [{"path": "results.cases", "entries": 300, "kept": 0, "counts": {"warp": {"pass": 48}}}],
}


def record(size: int, **extra: object) -> str:
    """A valid schema-1 record of exactly `size` bytes (its summary padded)."""
    data = {"schema": 1, "date": "2026-12-05", "kind": "gate", "rows": ["GOV-CORE"], "command": "pytest"}
    data |= extra
    data["summary"] = ""
    pad = size - len((json.dumps(data | {"summary": "x"}, indent=1) + "\n").encode()) + 1
    data["summary"] = "x" * pad
    text = json.dumps(data, indent=1) + "\n"
    assert len(text.encode()) == size
    return text


def _findings(repo: GitRepo, files: dict[str, str], config: str = "") -> list[tuple[str, str | None, str]]:
    repo.write({".agents/config.yaml": MINIMAL_CONFIG + config, **files})
    ctx = Context(root=repo.path, config=load_config(repo.path))
    result = agent_record.run(ctx, argparse.Namespace(base=None, head=None, message_file=None))
    return [(f.rule, f.path, f.message) for f in result.findings]


def test_a_9_kb_record_fails_with_its_path_size_and_the_cap(rowgate_repo: GitRepo):
    got = _findings(rowgate_repo, {BIG: record(9216), SMALL: record(8192)})
    assert got == [("AR009", BIG, "9216 bytes (cap 8192)")]


def test_records_at_the_cap_pass(rowgate_repo: GitRepo):
    assert _findings(rowgate_repo, {BIG: record(8192), SMALL: record(300)}) == []


def test_the_cap_is_configuration(rowgate_repo: GitRepo):
    got = _findings(rowgate_repo, {SMALL: record(4097)}, "record:\n  ledger_size_cap: 4096\n")
    assert got == [("AR009", SMALL, "4097 bytes (cap 4096)")]


def test_a_reviewed_exemption_lets_a_record_through(rowgate_repo: GitRepo):
    config = f"record:\n  ledger_size_exempt:\n    {BIG}: per-token logits the razor study reads whole\n"
    assert _findings(rowgate_repo, {BIG: record(9216)}, config) == []


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({SMALL: record(500)}, f"record.ledger_size_exempt names {SMALL}, which is 500 bytes, within the cap 8192"),
        ({}, f"record.ledger_size_exempt names {SMALL}, which is not a ledger record"),
    ],
    ids=["shrank", "gone"],
)
def test_an_exemption_no_longer_needed_fails(rowgate_repo: GitRepo, files: dict[str, str], message: str):
    config = f"record:\n  ledger_size_exempt:\n    {SMALL}: was big\n"
    assert _findings(rowgate_repo, files, config) == [("AR009", None, message)]


def test_a_trimmed_record_says_what_it_dropped_and_validates(rowgate_repo: GitRepo):
    assert _findings(rowgate_repo, {SMALL: record(2000, trimmed=TRIMMED)}) == []
    bad = {**TRIMMED, "sha256": "not-a-hash"}
    [(rule, path, message)] = _findings(rowgate_repo, {SMALL: record(2000, trimmed=bad)})
    assert (rule, path) == ("AR001", SMALL)
    assert message.startswith("trimmed.sha256: String should match pattern")


def test_the_config_schema_documents_the_cap():
    props = json_schema()["$defs"]["RecordConfig"]["properties"]
    assert props["ledger_size_cap"]["default"] == 8192 == SIZE_CAP  # the writers' constant is the default
    assert "AR009" in props["ledger_size_cap"]["description"]
    assert props["ledger_size_exempt"]["type"] == "object"
