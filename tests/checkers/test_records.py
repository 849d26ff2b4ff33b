"""Record loading: a malformed record is a problem with its path and line, never a traceback."""

from __future__ import annotations

import json

from checkers.records import key_line, load_records
from tests.conftest import GitRepo, row_yaml


def test_valid_records_load(rowgate_repo: GitRepo):
    rec = load_records(rowgate_repo.path)
    assert list(rec.rows) == ["GOV-CORE"] and rec.problems == []
    assert rec.specs[".agents/specs/GOV-CORE.md"].issues == {1}
    assert rec.specs[".agents/specs/GOV-CORE.md"].sections == {"Goal": 3, "Acceptance": 6, "Issues": 9}


def test_malformed_row_is_reported_with_path_and_line(rowgate_repo: GitRepo):
    rowgate_repo.write({".agents/rows/GOV-BAD.yaml": row_yaml("GOV-BAD", state="FINISHED")})
    rec = load_records(rowgate_repo.path)
    assert "GOV-BAD" not in rec.rows and "GOV-CORE" in rec.rows
    [problem] = rec.problems
    assert problem.lines()[0].startswith(".agents/rows/GOV-BAD.yaml:4: state: 'FINISHED' is not one of INVENTORIED")


def test_row_id_must_match_file_name(rowgate_repo: GitRepo):
    rowgate_repo.write({".agents/rows/GOV-ONE.yaml": row_yaml("GOV-TWO")})
    [problem] = load_records(rowgate_repo.path).problems
    assert problem.lines() == [".agents/rows/GOV-ONE.yaml:1: id: 'GOV-TWO' does not match the file name 'GOV-ONE'"]


def test_issue_front_matter_and_ledger_json_errors_carry_lines(rowgate_repo: GitRepo):
    rowgate_repo.write(
        {
            ".agents/issues/GOV-CORE/ISSUE-1.md": "---\nnumber: one\nrow: GOV-CORE\nfiled: 2026-11-29\n---\n# x\n",
            ".agents/ledger/2026-11-29-x.json": json.dumps(
                {
                    "schema": 1,
                    "date": "2026-11-29",
                    "kind": "gate",
                    "rows": ["GOV-CORE"],
                    "command": "x",
                    "summary": "s",
                    "surprise": 1,
                },
                indent=1,
            ),
        }
    )
    lines = sorted(line for p in load_records(rowgate_repo.path).problems for line in p.lines())
    assert lines == [
        ".agents/issues/GOV-CORE/ISSUE-1.md:2: number: Input should be a valid integer, unable to parse string as an integer",
        ".agents/ledger/2026-11-29-x.json:10: surprise: unknown key",
    ]


def test_a_ledger_record_is_read_by_its_schema(rowgate_repo: GitRepo):
    from checkers.ledger_schema import LedgerRecord2

    two = {
        "schema": 2,
        "date": "2026-01-01",
        "kind": "bench",
        "rows": ["GOV-X"],
        "command": "c",
        "commit": "a" * 40,
        "clean": True,
        "flags": {},
        "device": {"name": "cpu"},
        "versions": {"python": "3.11"},
        "summary": "s",
    }
    rowgate_repo.write(
        {
            ".agents/ledger/two.json": json.dumps(two),
            ".agents/ledger/two-bad.json": json.dumps({**two, "clean": False}),
        }
    )
    rec = load_records(rowgate_repo.path)
    assert isinstance(rec.ledger[".agents/ledger/two.json"].model, LedgerRecord2)
    [problem] = [p for p in rec.problems if p.path == ".agents/ledger/two-bad.json"]
    assert "a record from a dirty tree (clean: false) needs `diff`" in problem.lines()[0]


def test_a_json_record_is_read_as_json_and_its_errors_name_lines(rowgate_repo: GitRepo):
    """The ledger's JSON records skip the YAML loader; broken JSON, a non-object and a bad field each name
    their line, and the records that load keep their key lines for messages."""
    good = {"schema": 1, "date": "2026-11-29", "kind": "gate", "rows": ["GOV-CORE"], "command": "x", "summary": "s"}
    rowgate_repo.write(
        {
            ".agents/ledger/a-good.json": json.dumps(good, indent=1),
            ".agents/ledger/b-broken.json": '{\n "schema": 1,\n "date": \n}\n',
            ".agents/ledger/c-list.json": "[1, 2]\n",
            ".agents/ledger/d-kind.json": json.dumps({**good, "kind": "guess"}, indent=1),
        }
    )
    rec = load_records(rowgate_repo.path)
    lines = sorted(line for p in rec.problems for line in p.lines())
    assert lines == [
        ".agents/ledger/b-broken.json:4: invalid JSON: Expecting value",
        ".agents/ledger/c-list.json:1: a record is a JSON object, not list",
        ".agents/ledger/d-kind.json:4: kind: Input should be 'gate', 'bench', 'flip' or 'note'",
    ]
    entry = rec.ledger[".agents/ledger/a-good.json"]
    assert (entry.model.kind, key_line(entry.doc, "rows"), key_line(entry.doc, "nope")) == ("gate", 5, None)
