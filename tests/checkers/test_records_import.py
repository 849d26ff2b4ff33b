"""`rowgate records import` and `rowgate render --tables` on an excerpt of vllm.cpp's own tables: the round
trip gives the same bytes, the record commands work on the imported records, and a bad line is a skip with
its path:line, never a crash."""

from __future__ import annotations

import re
from pathlib import Path

from checkers.cli import main
from checkers.config import load_config
from checkers.records import load_records
from tests.checkers.vllmcpp_excerpt import ENGINE, excerpt_repo

TABLES = [
    ".agents/engine-matrix.md",
    ".agents/model-matrix.md",
    ".agents/quantization-matrix.md",
    ".agents/kernel-matrix.md",
    ".agents/backend-matrix.md",
    ".agents/coordination.md",
]


def _imported(path: Path) -> None:
    """Mark every table source of the repository's config as imported (what the user does after importing)."""
    config = path / ".agents" / "config.yaml"
    text = re.sub(r"^(      - paths: .*)$", r"\1\n        imported: true", config.read_text(), flags=re.M)
    config.write_text(text)


def _import(repo, *extra: str) -> int:
    return main(["records", "import", "--repo", str(repo.path), *extra])


def _tables(path: Path) -> dict[str, bytes]:
    return {rel: (path / rel).read_bytes() for rel in TABLES}


def test_import_then_render_gives_every_table_back_byte_for_byte(tmp_path: Path, capsys):
    repo = excerpt_repo(tmp_path / "repo")
    before = _tables(repo.path)
    assert _import(repo) == 0
    out = capsys.readouterr().out
    assert "wrote .agents/rows/ENG-SCHED-CORE.yaml (.agents/engine-matrix.md:12)" in out
    assert "wrote .agents/claims/CLAIM-SECOND.yaml (.agents/coordination.md:9)" in out
    assert "8 rows and 2 claims from 6 table files; 0 line(s) skipped" in out
    # every cell is kept, the unmapped ones too (Tier, Upstream code/tests)
    row = (repo.path / ".agents/rows/ENG-SCHED-CORE.yaml").read_text()
    assert "    Tier: T0\n" in row and "    Upstream code/tests: '`vllm/v1/core/sched/scheduler.py:396,640`'\n" in row
    _imported(repo.path)
    rec = load_records(repo.path, load_config(repo.path))
    assert rec.problems == [] and len(rec.rows) == 8 and len(rec.claims) == 2
    assert rec.rows["ENG-SCHED-CORE"].path == ".agents/rows/ENG-SCHED-CORE.yaml"
    assert rec.claims["CLAIM-KV-PERSISTENCE-LMCACHE"].model.row_ids == ["KV-OFFLOAD", "ENG-CHUNKED-PREFILL"]
    assert main(["render", "--tables", "--check", "--repo", str(repo.path)]) == 0
    # a table line emptied by hand is written back from its record
    engine = repo.path / ".agents/engine-matrix.md"
    engine.write_text(
        re.sub(r"^\| `ENG-SCHED-CORE` .*$", "| `ENG-SCHED-CORE` |  |  |  |  |  |  |  |  |", ENGINE, flags=re.M)
    )
    assert main(["render", "--tables", "--repo", str(repo.path)]) == 0
    assert _tables(repo.path) == before


def test_row_set_and_claim_on_imported_records_reach_the_tables(tmp_path: Path, capsys):
    repo = excerpt_repo(tmp_path / "repo")
    assert _import(repo) == 0
    _imported(repo.path)
    assert main(["claim", "KERNEL-GEMM-FP8", "--branch", "port/gemm", "--owner", "me", "--state", "SPIKE",
                 "--claim-id", "CLAIM-GEMM", "--repo", str(repo.path)]) == 0  # fmt: skip
    assert main(["row", "set", "KV-OFFLOAD", "--state", "READY", "--repo", str(repo.path)]) == 0
    capsys.readouterr()
    assert main(["render", "--tables", "--check", "--repo", str(repo.path)]) == 1
    assert main(["render", "--tables", "--repo", str(repo.path)]) == 0
    out, err = capsys.readouterr()
    assert "wrote .agents/kernel-matrix.md" in out and "wrote .agents/engine-matrix.md" in out
    kernel = (repo.path / ".agents/kernel-matrix.md").read_text().splitlines()
    assert (
        kernel[2] == "| `KERNEL-GEMM-FP8` | FP8 GEMM | `csrc/quantization/fp8` | - | - | - | `SPIKE` | `CLAIM-GEMM` |"
    )
    engine = (repo.path / ".agents/engine-matrix.md").read_text().splitlines()
    # READY released KV-OFFLOAD's claim: the claim name leaves the Owner cell, the row's other cells stay
    assert engine[12] == (
        "| `KV-OFFLOAD` | KV offload tiering | T1 | `vllm/v1/kv_offload/` | - | - | "
        "[spike](specs/kv-persistence-lmcache.md) | `READY` | - |"
    )
    # the two-row claim lets go of KV-OFFLOAD and keeps its other row; the one-row claim is released, its
    # table line kept, and render says so
    coordination = (repo.path / ".agents/coordination.md").read_text().splitlines()
    assert coordination[4].startswith("| `CLAIM-KV-PERSISTENCE-LMCACHE` | `ENG-CHUNKED-PREFILL` | Claude Code")
    assert ".agents/coordination.md:9: CLAIM-SECOND has no record file; the line is kept" in err
    assert main(["check", "agent-record", "--repo", str(repo.path)]) in (0, 1)  # the records still load
    rec = load_records(repo.path, load_config(repo.path))
    assert rec.problems == [] and sorted(rec.claims) == ["CLAIM-GEMM", "CLAIM-KV-PERSISTENCE-LMCACHE"]
    assert rec.claims["CLAIM-KV-PERSISTENCE-LMCACHE"].model.row_ids == ["ENG-CHUNKED-PREFILL"]


def test_a_malformed_line_is_reported_and_skipped(tmp_path: Path, capsys):
    broken = ENGINE.replace("| `ACTIVE` | `CLAIM-KV-PERSISTENCE-LMCACHE` |", "| `ACTIVE` |")
    repo = excerpt_repo(tmp_path / "repo", **{".agents/engine-matrix.md": broken})
    assert _import(repo) == 1
    out, err = capsys.readouterr()
    assert ".agents/engine-matrix.md:13: skipped: table line has 8 cells; its header (line 9) has 9" in err
    assert "7 rows and 2 claims from 6 table files; 1 line(s) skipped" in out
    assert not (repo.path / ".agents/rows/KV-OFFLOAD.yaml").exists()
    assert (repo.path / ".agents/rows/ENG-SCHED-CORE.yaml").exists()


def test_dry_run_writes_nothing(tmp_path: Path, capsys):
    repo = excerpt_repo(tmp_path / "repo")
    assert _import(repo, "--dry-run") == 0
    out = capsys.readouterr().out
    assert "would write .agents/rows/BACKEND-XPU.yaml (.agents/backend-matrix.md:3)" in out
    assert out.splitlines()[-1] == "dry run: 8 rows and 2 claims from 6 table files; 0 line(s) skipped"
    assert repo.git("status", "--porcelain", "--untracked-files=all") == ""


def test_existing_record_files_are_not_overwritten_without_force(tmp_path: Path, capsys):
    repo = excerpt_repo(tmp_path / "repo")
    assert _import(repo) == 0
    row = repo.path / ".agents/rows/BACKEND-XPU.yaml"
    row.write_text("# edited by hand\n")
    capsys.readouterr()
    assert _import(repo) == 1
    err = capsys.readouterr().err
    assert "10 record file(s) exist (.agents/rows/ENG-CHUNKED-PREFILL.yaml" in err
    assert "nothing written. Pass --force to overwrite them." in err
    assert row.read_text() == "# edited by hand\n"
    assert _import(repo, "--force") == 0
    assert row.read_text().startswith("# Row BACKEND-XPU, imported from .agents/backend-matrix.md:3")


def test_render_tables_without_an_imported_source_is_a_usage_error(tmp_path: Path, capsys):
    repo = excerpt_repo(tmp_path / "repo")
    assert main(["render", "--tables", "--repo", str(repo.path)]) == 2
    assert "no table source has `imported: true`" in capsys.readouterr().err


def test_an_id_that_is_no_file_name_is_skipped(tmp_path: Path, capsys):
    kernel = "| ID | Item | Upstream | Our code | Tests/evidence | Spike/spec | State | Owner |\n|---|---|---|---|---|---|---|---|\n"
    kernel += "| `../../x` | x | x | - | - | - | `INVENTORIED` | - |\n"
    repo = excerpt_repo(tmp_path / "repo", **{".agents/kernel-matrix.md": kernel})
    config = repo.path / ".agents/config.yaml"  # no id pattern on the kernel table: any id cell is a record
    config.write_text(config.read_text().replace("        id_pattern: 'KERNEL-[A-Za-z0-9_.-]+'\n", ""))
    assert _import(repo) == 1
    assert ".agents/kernel-matrix.md:3: skipped: id: '../../x' is not a usable file name" in capsys.readouterr().err
    assert sorted(p.name for p in (repo.path / ".agents").rglob("*.yaml") if "x" == p.stem) == []


def test_a_header_renamed_after_the_import_is_a_note_not_a_silent_loss(tmp_path: Path, capsys):
    repo = excerpt_repo(tmp_path / "repo")
    assert _import(repo) == 0
    _imported(repo.path)
    engine = repo.path / ".agents/engine-matrix.md"
    engine.write_text(engine.read_text().replace("| Item | Tier |", "| Item | Level |"))
    capsys.readouterr()
    assert main(["render", "--tables", "--check", "--repo", str(repo.path)]) == 1
    assert ".agents/engine-matrix.md: ENG-SCHED-CORE: no column 'Tier' in the table; not written" in (
        capsys.readouterr().err
    )
