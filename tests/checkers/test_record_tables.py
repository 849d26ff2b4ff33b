"""Records read from markdown tables (sources: in the config), on an excerpt of vllm.cpp's own records:
the record checks run over them unchanged, and each table problem is a finding at its path:line."""

from __future__ import annotations

import argparse
from pathlib import Path

from checkers.checks.records import agent_record, live_rows
from checkers.config import load_config
from checkers.context import Context
from checkers.records import load_records
from checkers.recordsources.tables import read_tables, split_cells
from tests.checkers.vllmcpp_excerpt import ENGINE, excerpt_repo


def _ctx(repo) -> Context:
    return Context(root=repo.path, config=load_config(repo.path))


def _agent_record(repo):
    return agent_record.run(_ctx(repo), argparse.Namespace(base=None, head=None, message_file=None))


def _findings(result) -> list[tuple[str, str, int | None, str]]:
    return [(f.rule, f.path, f.line, f.message) for f in result.findings]


def test_split_cells_keeps_escaped_pipes_and_the_last_cell():
    assert split_cells(r"| `a\|b` | c |") == (r"`a\|b`", "c")
    assert split_cells("| a | b") == ("a", "b")  # no closing pipe: still two cells


def test_read_tables_finds_header_separator_and_lines():
    [summary, matrix] = read_tables(ENGINE)
    assert summary.names[:2] == ("area", "rows") and summary.separator == 4
    assert matrix.names[5] == "our tests evidence" and [x.line for x in matrix.lines] == [11, 12, 13]


def test_the_excerpt_loads_every_table_row_and_claim(tmp_path: Path):
    repo = excerpt_repo(tmp_path / "repo")
    rec = load_records(repo.path, load_config(repo.path))
    assert rec.problems == []
    assert sorted(rec.rows) == [
        "BACKEND-XPU",
        "ENG-CHUNKED-PREFILL",
        "ENG-SCHED-CORE",
        "KERNEL-GEMM-FP8",
        "KV-OFFLOAD",
        "MODEL-TEXT-afmoe-afmoe-for-causal-lm",
        "MODEL-TEXT-apertus-apertus-for-causal-lm",
        "QUANT-GGUF-F32",
    ]
    core = rec.rows["ENG-SCHED-CORE"]
    assert (core.path, core.line, core.model.state, core.model.area) == (
        ".agents/engine-matrix.md",
        12,
        "DONE",
        "ENGINE",
    )
    assert core.model.anchors == ["src/vllm/v1/core/sched/scheduler.cpp:1,4", "tests/vllm/v1/test_scheduler.cpp:1-3"]
    assert core.model.spec == ".agents/specs/unified-scheduler.md"
    # link targets with #L fragments become path:line anchors, relative to the table's folder
    assert rec.rows["QUANT-GGUF-F32"].model.anchors == [
        "src/vllm/model_executor/model_loader/gguf_dequant.cpp:2",
        "tests/vllm/test_gguf_dequant.cpp:1",
    ]
    # one claim names two rows; the claim after the prose line is read as part of the same table
    claim = rec.claims["CLAIM-KV-PERSISTENCE-LMCACHE"].model
    assert claim.row_ids == ["KV-OFFLOAD", "ENG-CHUNKED-PREFILL"]
    assert rec.claims["CLAIM-SECOND"].model.branch == "feat/second"
    assert rec.claims["CLAIM-SECOND"].line == 9


def test_agent_record_passes_and_prints_the_counts_per_matrix(tmp_path: Path):
    result = _agent_record(excerpt_repo(tmp_path / "repo"))
    assert (result.status.value, result.summary) == ("pass", "OK: ENGINE=3 MODEL=2 QUANT=1 KERNEL=1 BACKEND=1")
    assert result.details[:2] == [
        "rows: ENGINE=3 MODEL=2 QUANT=1 KERNEL=1 BACKEND=1",
        ".agents/engine-matrix.md: 3 rows",
    ]


def test_a_malformed_table_line_is_a_finding_at_its_line(tmp_path: Path):
    broken = ENGINE.replace("| `INVENTORIED` | - |", "|").replace(
        "| `ACTIVE` | `CLAIM-KV-PERSISTENCE-LMCACHE` |", "| `ACTIVE` |"
    )
    result = _agent_record(excerpt_repo(tmp_path / "repo", **{".agents/engine-matrix.md": broken}))
    assert ("AR001", ".agents/engine-matrix.md", 13, "table line has 8 cells; its header (line 9) has 9") in _findings(
        result
    )


def test_a_duplicate_id_across_tables_is_a_finding(tmp_path: Path):
    kernel = "| ID | Item | Upstream | Our code | Tests/evidence | Spike/spec | State | Owner |\n|---|---|---|---|---|---|---|---|\n"
    kernel += "| `KERNEL-GEMM-FP8` | FP8 GEMM | x | - | - | - | `INVENTORIED` | - |\n" * 2
    result = _agent_record(excerpt_repo(tmp_path / "repo", **{".agents/kernel-matrix.md": kernel}))
    assert _findings(result) == [
        (
            "AR001",
            ".agents/kernel-matrix.md",
            4,
            "id: duplicate row id KERNEL-GEMM-FP8; first at .agents/kernel-matrix.md:3",
        )
    ]


def test_a_state_outside_the_configured_set_is_a_finding(tmp_path: Path):
    engine = ENGINE.replace("`ANCHOR-BACKFILL` | - |", "`BACKFILLED` | - |")
    result = _agent_record(excerpt_repo(tmp_path / "repo", **{".agents/engine-matrix.md": engine}))
    # the row is not read, so the claim that names it points at nothing (AR003 at the claim's line)
    f, claim, *rollup = _findings(result)
    assert [x[3] for x in rollup] == ["summary rows=3; actual 2", "summary anchor backfill=1; actual 0"]
    assert claim[:3] == ("AR003", ".agents/coordination.md", 5)
    assert f[:3] == ("AR001", ".agents/engine-matrix.md", 11)
    assert f[3].startswith("state: 'BACKFILLED' is not one of INVENTORIED, SPIKE, READY, ACTIVE, GATING, PARTIAL, DONE")
    assert "ANCHOR-BACKFILL, BUILD-ONLY, UNTRACED" in f[3]


def test_an_anchor_line_list_past_the_end_of_its_file_is_a_finding(tmp_path: Path):
    engine = ENGINE.replace("scheduler.cpp:1,4`", "scheduler.cpp:1,9`")
    result = _agent_record(excerpt_repo(tmp_path / "repo", **{".agents/engine-matrix.md": engine}))
    assert _findings(result) == [
        (
            "AR003",
            ".agents/engine-matrix.md",
            12,
            "anchor src/vllm/v1/core/sched/scheduler.cpp:1,9 is out of range "
            "(src/vllm/v1/core/sched/scheduler.cpp has 4 lines)",
        )
    ]


def test_an_evidenced_state_without_a_test_anchor_is_a_finding(tmp_path: Path):
    engine = ENGINE.replace("`tests/vllm/v1/test_scheduler.cpp:2`", "-")
    [f] = _findings(_agent_record(excerpt_repo(tmp_path / "repo", **{".agents/engine-matrix.md": engine})))
    assert f == (
        "AR004",
        ".agents/engine-matrix.md",
        11,
        "state ANCHOR-BACKFILL needs code and test anchors: no test anchor among "
        "['src/vllm/v1/core/sched/scheduler.cpp:2,3']",
    )


def test_a_short_closing_commit_that_does_not_exist_is_a_finding(tmp_path: Path):
    repo = excerpt_repo(tmp_path / "repo")
    engine = (repo.path / ".agents/engine-matrix.md").read_text()
    sha = engine.split("`DONE` | `")[1][:7]
    repo.commit("bad sha", {".agents/engine-matrix.md": engine.replace(sha, "0000000")})
    assert ("AR003", ".agents/engine-matrix.md", 12, "closing commit 0000000 does not exist in this repository") in [
        f for f in _findings(_agent_record(repo))
    ]


def test_a_claim_naming_an_unknown_row_among_several_is_a_finding(tmp_path: Path):
    from tests.checkers.vllmcpp_excerpt import COORDINATION

    coordination = COORDINATION.replace("`KV-OFFLOAD`, `ENG-CHUNKED-PREFILL`", "`KV-OFFLOAD`, `ENG-GONE`")
    result = _agent_record(excerpt_repo(tmp_path / "repo", **{".agents/coordination.md": coordination}))
    assert _findings(result) == [
        (
            "AR003",
            ".agents/coordination.md",
            5,
            "claim CLAIM-KV-PERSISTENCE-LMCACHE names row ENG-GONE, which does not exist",
        )
    ]


def test_live_rows_judges_a_multi_row_claim_on_each_row(tmp_path: Path):
    repo = excerpt_repo(tmp_path / "repo")
    repo.git("branch", "feat/second")  # CLAIM-SECOND's branch exists: that claim is live
    result = live_rows.run(_ctx(repo), argparse.Namespace(check=True, report=False))
    # ENG-CHUNKED-PREFILL is ANCHOR-BACKFILL, not an active state: the claim that names it is stale for it
    assert [(f.rule, f.line, f.message) for f in result.findings] == [
        (
            "LR003",
            5,
            "claim CLAIM-KV-PERSISTENCE-LMCACHE points at row ENG-CHUNKED-PREFILL, which is ANCHOR-BACKFILL "
            "(active: SPIKE, ACTIVE)",
        )
    ]


def test_without_sources_the_records_are_the_files(rowgate_repo):
    rec = load_records(rowgate_repo.path, load_config(rowgate_repo.path))
    assert list(rec.rows) == ["GOV-CORE"] and rec.tables == {}


def test_live_rows_classifies_each_claim_from_git_evidence(tmp_path: Path):
    from tests.checkers.vllmcpp_excerpt import COORDINATION

    dated = COORDINATION.replace("2026-07-22", "2025-12-31").replace("2026-07-23", "2025-12-31")
    repo = excerpt_repo(tmp_path / "repo", **{".agents/coordination.md": dated})
    args = argparse.Namespace(check=False, report=True)
    verdicts = live_rows.run(_ctx(repo), args).details[-1]
    assert verdicts == "claims: IN-FLIGHT=0 LANDED=0 ABANDONED=2"
    repo.git("checkout", "-q", "-b", "feat/second")
    repo.commit("wip on the second claim", {"src/x.cpp": "x\n"})
    repo.git("checkout", "-q", "main")
    landed = repo.commit("KV-OFFLOAD: CPU tier lands", {"src/kv.cpp": "x\n"})
    details = live_rows.run(_ctx(repo), args).details
    assert details[-1] == "claims: IN-FLIGHT=1 LANDED=1 ABANDONED=0"
    assert f"| LANDED: commit {landed[:12]} on HEAD names it (2026-01-01) |" in details[2]


def test_a_backtracking_column_pattern_is_stopped_not_run_to_the_end(tmp_path: Path):
    # the config is the repository's, so branch content: a nested quantifier on a long cell must not hang
    from checkers.safe_regex import PatternTimeout
    from tests.checkers.vllmcpp_excerpt import CONFIG, KERNEL

    config = CONFIG.read_text().replace("pattern: 'CLAIM-[A-Za-z0-9_.-]+'}", "pattern: '(a|aa)+$'}")
    kernel = KERNEL.replace("| `INVENTORIED` | - |", "| `INVENTORIED` | " + "a" * 40 + "! |")
    repo = excerpt_repo(tmp_path / "repo", **{".agents/config.yaml": config, ".agents/kernel-matrix.md": kernel})
    try:
        load_records(repo.path, load_config(repo.path))
    except PatternTimeout as exc:
        assert "ran past" in str(exc)
    else:
        raise AssertionError("the pattern ran to its end")
