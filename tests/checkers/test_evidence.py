"""evidence: every rule has a seeded violation on a real repository (a fixture document named for its defect)
and the good twin passes; schema-2 records are validated and held to their self-test."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from checkers.checks import evidence
from checkers.config import load_config
from checkers.context import Context
from checkers.ledger_schema import LedgerRecord2
from tests.conftest import ROOT, GitRepo, row_yaml

FIXTURES = ROOT / "tests" / "fixtures" / "evidence"
FLAGS = 'declare("VT_A", False, "GOV-X", "a")\ndeclare("VT_B", True, "GOV-X", "b")\n'


def v2(commit: str, **over: Any) -> dict[str, Any]:
    record = {
        "schema": 2,
        "date": "2026-01-01",
        "kind": "bench",
        "rows": ["GOV-X"],
        "command": "python -m engine bench throughput --requests 256",
        "commit": commit,
        "clean": True,
        "flags": {"VT_A": False, "VT_B": True},
        "device": {"name": "NVIDIA H200", "driver": "580.1", "cuda": "13.0"},
        "versions": {"python": "3.11.9", "torch": "2.11.0"},
        "summary": "256 requests",
        "figures": [
            {"name": "tok_per_s", "value": 17873.4, "unit": "tok/s"},
            {"name": "ratio", "value": 9.5702, "unit": "x"},
        ],
        "paths": ["src/kernel.py"],
    }
    record.update(over)
    return record


def _record(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1) + "\n"


@pytest.fixture
def repo(rowgate_repo: GitRepo) -> GitRepo:
    """A repository whose row measured src/kernel.py, with four records of its one commit."""
    c = rowgate_repo.commit(
        "Kernel\n\nRow: GOV-X\n",
        {
            "src/kernel.py": "x = 1\n",
            "engine/flags.py": FLAGS,
            ".agents/rows/GOV-X.yaml": row_yaml("GOV-X") + "anchors: [src/kernel.py]\n",
        },
    )
    diff = {"sha256": "0" * 64, "paths": ["src/kernel.py"]}
    rowgate_repo.commit(
        "Records\n\nRow: GOV-X\n",
        {
            ".agents/ledger/clean.json": _record(v2(c)),
            ".agents/ledger/dirty.json": _record(v2(c, clean=False, dirty_allowed=True, diff=diff)),
            ".agents/ledger/other-flags.json": _record(v2(c, flags={"VT_A": True, "VT_B": True})),
            ".agents/ledger/legacy.json": _record(
                {
                    "schema": 1,
                    "date": "2026-01-01",
                    "kind": "bench",
                    "rows": ["GOV-X"],
                    "command": "x",
                    "sha": c,
                    "summary": "9.1x the peer",
                }
            ),
        },
    )
    return rowgate_repo


def _check(repo: GitRepo, fixture: str, extra: str = "") -> Any:
    measured = repo.git("log", "--format=%H", "--reverse", "HEAD", "--", "src/kernel.py").split()[0]
    text = (FIXTURES / fixture).read_text().replace("{SHA7}", measured[:7])
    repo.write({"DOC.md": text, ".agents/config.yaml": f"version: 1\nevidence:\n  documents: [DOC.md]\n{extra}"})
    ctx = Context(root=repo.path, config=load_config(repo.path), env={})
    return evidence.run(ctx, argparse.Namespace())


def _lines(result: Any) -> list[tuple[str, str | None, int | None, str]]:
    return [(f.rule, f.path, f.line, f.message) for f in result.findings]


def test_good_twin_passes(repo: GitRepo):
    result = _check(repo, "good.md")
    assert (result.status.value, result.summary) == (
        "pass",
        "OK: 4 citations in DOC.md stand on 4 ledger records",
    )


def test_number_that_differs_from_its_record(repo: GitRepo):
    assert _lines(_check(repo, "value-mismatch.md")) == [
        ("EV001", "DOC.md", 3, "17,900 is not in .agents/ledger/clean.json (to the printed precision)")
    ]


def test_number_citing_a_missing_record(repo: GitRepo):
    assert _lines(_check(repo, "record-missing.md")) == [
        ("EV002", "DOC.md", 3, "2026-01-01-no-such-run.json is not in .agents/ledger")
    ]


def test_headline_backed_by_a_dirty_tree_record(repo: GitRepo):
    result = _check(repo, "dirty-headline.md")
    assert _lines(result) == [
        ("EV003", "DOC.md", 3, "a headline number stands on .agents/ledger/dirty.json, made from a dirty tree")
    ]
    assert "relabel it as dated" in (result.findings[0].hint or "")


def test_headline_backed_by_a_legacy_record_fails_or_is_noted(repo: GitRepo):
    message = "a headline number stands on .agents/ledger/legacy.json, which has no flag snapshot (schema 1)"
    assert _lines(_check(repo, "legacy-headline.md")) == [("EV003", "DOC.md", 3, message)]
    noted = _check(repo, "legacy-headline.md", "  legacy: note\n")
    assert (noted.status.value, noted.details) == ("pass", [f"DOC.md:3: EV003 (legacy, noted) {message}"])


def test_defaults_number_whose_record_ran_other_flags(repo: GitRepo):
    assert _lines(_check(repo, "defaults-other-flags.md")) == [
        (
            "EV005",
            "DOC.md",
            3,
            "a defaults number stands on .agents/ledger/other-flags.json, which ran VT_A=1 (default 0)",
        )
    ]


def test_record_made_stale_by_a_later_change_to_what_it_measured(repo: GitRepo):
    assert _check(repo, "stale.md").status.value == "pass"
    edit = repo.commit("Kernel: faster\n\nRow: GOV-X\n", {"src/kernel.py": "x = 2\n"})
    result = _check(repo, "stale.md")
    assert [(f.rule, f.line) for f in result.findings] == [("EV004", 3)]
    assert result.findings[0].message.endswith(f"1 commits since changed what it measured: {edit[:7]} Kernel: faster")


def test_the_history_cache_never_hides_a_change_to_what_was_measured(repo: GitRepo):
    """Each commit's changed paths are kept by its sha: a commit after a green cached run is diffed and makes
    the record stale, and a cached entry emptied by hand (its seal kept) is diffed again."""
    from checkers.contentcache import CACHE_DIR

    assert _check(repo, "stale.md").status.value == "pass"
    assert _check(repo, "stale.md").status.value == "pass"  # the history from the cache
    edit = repo.commit("Kernel: faster\n\nRow: GOV-X\n", {"src/kernel.py": "x = 2\n"})
    stale = [("EV004", 3)]
    assert [(f.rule, f.line) for f in _check(repo, "stale.md").findings] == stale
    cache = Path(repo.git("rev-parse", "--absolute-git-dir").strip()) / CACHE_DIR / "evidence-history.json"
    data = json.loads(cache.read_text())
    assert "src/kernel.py" in data["entries"][edit][1]
    data["entries"][edit][1].remove("src/kernel.py")
    cache.write_text(json.dumps(data))
    result = _check(repo, "stale.md")
    assert [(f.rule, f.line) for f in result.findings] == stale
    assert result.findings[0].message.endswith(f"1 commits since changed what it measured: {edit[:7]} Kernel: faster")


def test_dated_citation_of_a_stale_record_is_noted_with_the_commits_since(repo: GitRepo):
    repo.commit("Kernel: faster\n\nRow: GOV-X\n", {"src/kernel.py": "x = 2\n"})
    result = _check(repo, "good.md")
    assert [(f.rule, f.line) for f in result.findings] == [("EV004", 5), ("EV004", 5)]  # the current citations
    assert len(result.details) == 1 and "9.1 [legacy @ 2026-01-01" in result.details[0]
    assert "1 commits since changed what it measured" in result.details[0]


def test_headline_without_a_citation_beside_it(repo: GitRepo):
    assert _lines(_check(repo, "headline-uncited.md")) == [
        (
            "EV010",
            "DOC.md",
            3,
            "headline '- Serving: 17,873 output tok/s (`clean.json`).' cites no record beside its number",
        )
    ]


def test_dated_label_that_disagrees_with_its_record(repo: GitRepo):
    result = _check(repo, "label-mismatch.md")
    assert [(f.rule, f.line) for f in result.findings] == [("EV009", 3)]
    assert result.findings[0].message.startswith("dated label '2025-12-31 ")


def test_schema_2_records_are_validated_and_hold_their_self_test(repo: GitRepo):
    c = repo.head()
    repo.write(
        {
            ".agents/ledger/bad.json": _record(v2(c, clean=False)),
            ".agents/ledger/big.json": _record(v2(c, results=["x" * 100] * 90)),  # the cap is agent-record's AR009
            ".agents/ledger/gate.json": _record(v2(c, kind="gate")),
            ".agents/ledger/blind.json": _record(v2(c, kind="gate", comparator_selftest={"seeded": 3, "caught": 2})),
            ".agents/ledger/broken.json": "{",
        }
    )
    got = sorted((f.rule, f.path) for f in _check(repo, "good.md").findings)
    assert got == [
        ("EV006", ".agents/ledger/bad.json"),
        ("EV006", ".agents/ledger/broken.json"),
        ("EV008", ".agents/ledger/blind.json"),
        ("EV008", ".agents/ledger/gate.json"),
    ]


def test_no_ledger_skips_as_not_configured(git_repo: GitRepo):
    git_repo.commit("empty", {"README.md": "x\n"})
    ctx = Context(root=git_repo.path, config=load_config(git_repo.path), env={})
    result = evidence.run(ctx, argparse.Namespace())
    assert (result.status.value, result.summary) == (
        "skip",
        "not configured: no ledger at .agents/ledger (evidence.ledger_dir)",
    )


def test_the_schema_model_refuses_a_dirty_record_without_its_switch():
    with pytest.raises(ValueError, match="dirty_allowed"):
        LedgerRecord2.model_validate(v2("a" * 40, clean=False, diff={"sha256": "0" * 64, "paths": ["x"]}))


def test_this_repository_passes():
    ctx = Context(root=ROOT, config=load_config(ROOT), env={})
    result = evidence.run(ctx, argparse.Namespace())
    assert result.status.value == "pass", [f"{f.path}:{f.line} {f.rule} {f.message}" for f in result.findings]


def test_fixture_files_exist():
    assert sorted(p.name for p in Path(FIXTURES).glob("*.md")) == sorted(
        [
            "good.md",
            "value-mismatch.md",
            "record-missing.md",
            "dirty-headline.md",
            "defaults-other-flags.md",
            "stale.md",
            "headline-uncited.md",
            "label-mismatch.md",
            "legacy-headline.md",
        ]
    )


def test_row_anchors_read_as_the_yaml_loader_reads_them():
    from checkers.checks.evidence.ledger import row_anchors
    from checkers.yamlio import read_yaml

    rows = sorted((ROOT / ".agents" / "rows").glob("*.yaml"))
    assert rows
    for path in rows:
        assert row_anchors(path.read_text()) == [str(a) for a in read_yaml(path).get("anchors") or []], path
    assert row_anchors("id: X\nanchors: [a.py, 'b/']\n") == ["a.py", "b/"]


def test_schema_2_record_backs_only_its_figures(repo: GitRepo):
    repo.write({"x": ""})
    (repo.path / ".agents/ledger/clean.json").write_text(_record(v2(repo.head(), results={"tok_per_s": 17900})))
    assert [f.rule for f in _check(repo, "value-mismatch.md").findings] == ["EV001"]


def test_config_schema_prints_the_ledger_schema(capsys):
    from checkers.cli import main

    assert main(["config", "schema", "--ledger"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"].startswith("rowgate ledger record, schema 2")
    assert {"commit", "clean", "flags", "figures", "comparator_selftest"} <= set(schema["properties"])


def test_a_headline_record_whose_commit_is_not_in_the_history_cannot_be_judged_fresh(repo: GitRepo):
    c = "b" * 40
    repo.write({".agents/ledger/clean.json": _record(v2(c))})
    assert _lines(_check(repo, "stale.md")) == [
        (
            "EV004",
            "DOC.md",
            3,
            f".agents/ledger/clean.json names commit {c[:12]}, which this history does not hold: whether it is stale "
            "cannot be told",
        )
    ]


def test_a_headline_record_that_measured_nothing_cannot_be_judged_fresh(repo: GitRepo):
    c = repo.git("log", "--format=%H", "--reverse", "HEAD", "--", "src/kernel.py").split()[0]
    repo.write({".agents/ledger/clean.json": _record(v2(c, paths=[], rows=["GOV-NONE"]))})
    assert [f.message for f in _check(repo, "stale.md").findings] == [
        ".agents/ledger/clean.json names no path it measured, and its rows have no anchors: whether it is stale "
        "cannot be told"
    ]


def test_another_repository_layout_from_the_config(git_repo: GitRepo):
    """The docs page's example: records under bench/records/, numbers in PERF.md cited as `(run: NAME)`, no flag
    registry and no rows."""
    c = git_repo.commit("Kernel\n", {"src/kernel.py": "x = 1\n"})
    git_repo.commit(
        "Record\n",
        {
            "bench/records/serve.json": _record(v2(c)),
            "PERF.md": "## Results\n\n- Serving: **17,873** tok/s (run: serve).\n- Cited wrong: **18,000** (run: serve).\n",
            ".agents/config.yaml": (
                "version: 1\nevidence:\n  ledger_dir: bench/records\n  documents: [PERF.md]\n"
                "  marker: '\\(run:\\s*(?P<name>[A-Za-z0-9._-]+?)(?:\\s*@\\s*(?P<label>[^)]*))?\\)'\n"
                "  headline_sections: [Results]\n  flags_file: null\n  anchors_from: null\n"
            ),
        },
    )
    ctx = Context(root=git_repo.path, config=load_config(git_repo.path), env={})
    result = evidence.run(ctx, argparse.Namespace())
    assert _lines(result) == [
        ("EV001", "PERF.md", 4, "18,000 is not in bench/records/serve.json (to the printed precision)")
    ]
    assert result.examined == 1 + 2  # one record, two citations


def test_a_schema_2_record_that_validated_is_not_validated_again_until_it_changes(repo: GitRepo, monkeypatch):
    from checkers.checks.evidence import ledger

    assert _check(repo, "good.md").status.value == "pass"  # validates the four records and remembers them
    seen: list[str] = []
    monkeypatch.setattr(ledger, "validate_v2", lambda rec: seen.append(rec.name) or [])
    assert _check(repo, "good.md").status.value == "pass"
    assert seen == []  # every record came from the cache, without pydantic
    repo.write({".agents/ledger/clean.json": _record(v2(repo.head(), summary="changed"))})
    _check(repo, "good.md")
    assert seen == ["clean"]


def test_a_trimmed_legacy_record_is_held_to_what_it_kept_not_to_its_trim_note():
    from checkers.checks.evidence.ledger import Record

    data = {"schema": 1, "summary": "300/300 cases", "trimmed": {"bytes": 124853, "dropped": [{"entries": 411}]}}
    rec = Record("r", "r.json", 0, data)
    assert rec.holds("300") and not rec.holds("124,853") and not rec.holds("411")
