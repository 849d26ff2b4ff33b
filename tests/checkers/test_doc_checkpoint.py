"""doc-checkpoint and `rowgate render`: seeded violations on real repositories, and clean twins."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from checkers.checks.records import doc_checkpoint
from checkers.config import load_config
from checkers.context import Context
from checkers.flagdecls import parse_flag_decls
from checkers.records import load_records
from checkers.render import load_views, render_environment
from tests.checkers.vllmcpp_excerpt import excerpt_repo
from tests.conftest import MINIMAL_CONFIG, GitRepo, row_yaml

FLAGS = 'declare("VT_FAST", False, "GOV-CORE", "A fast arm | with a pipe.")\ndeclare("VT_DIR", "", "GOV-CORE", "x")\n'


def _run(repo: GitRepo, base: str | None = None):
    ctx = Context(root=repo.path, config=load_config(repo.path), env={})
    return doc_checkpoint.run(ctx, argparse.Namespace(base=base, head=None))


def _render(repo: GitRepo) -> dict[str, str]:
    views = load_views(repo.path, load_records(repo.path), load_config(repo.path))
    repo.write(views)
    return views


@pytest.fixture
def repo(rowgate_repo: GitRepo) -> GitRepo:
    """Rendered views committed, and the range rule starting after that commit."""
    rowgate_repo.write({"engine/flags.py": FLAGS})
    _render(rowgate_repo)
    start = rowgate_repo.commit("Render\n\nRow: GOV-CORE\n")
    rowgate_repo.commit("Configure\n\nRow: GOV-CORE\n", {".agents/config.yaml": MINIMAL_CONFIG + f"cutover: {start}\n"})
    return rowgate_repo


def test_environment_table_format_is_the_env_doc_contract():
    text = render_environment(parse_flag_decls(FLAGS))
    assert text.splitlines()[-4:] == [
        "| flag | default | gates | description |",
        "|---|---|---|---|",
        "| `VT_FAST` | OFF | GOV-CORE | A fast arm \\| with a pipe. |",
        "| `VT_DIR` | '' | GOV-CORE | x |",
    ]


def test_clean_twin_counts_files_and_commits(repo: GitRepo):
    result = _run(repo)
    assert (result.status.value, result.summary, result.examined) == (
        "pass",
        "OK: 4 rendered files up to date; 1 commits checked",
        5,
    )


def test_dc001_rendered_doc_stale_shows_the_diff(repo: GitRepo):
    repo.write({".agents/rows/GOV-CORE.yaml": row_yaml("GOV-CORE").replace("Row GOV-CORE", "Renamed")})
    result = _run(repo)
    assert [(f.rule, f.path, f.message) for f in result.findings] == [
        ("DC001", "docs/matrices/GOV.md", "docs/matrices/GOV.md is out of date with the records (2 lines differ)"),
        ("DC001", "docs/ROADMAP.md", "docs/ROADMAP.md is out of date with the records (2 lines differ)"),
    ]
    assert "+| GOV-CORE | READY | Renamed |  |  |  |" in result.details


def test_dc002_state_change_without_render(repo: GitRepo):
    sha = repo.commit(
        "Start it\n\nRow: GOV-CORE\n", {".agents/rows/GOV-CORE.yaml": row_yaml("GOV-CORE", state="INVENTORIED")}
    )
    _render(repo)
    repo.commit("Render later\n\nRow: GOV-CORE\n")
    [f] = _run(repo).findings
    assert (f.rule, f.path, f.message) == (
        "DC002",
        ".agents/rows/GOV-CORE.yaml",
        f"commit {sha[:12]} moves GOV-CORE from READY to INVENTORIED but "
        "does not update docs/ROADMAP.md, docs/matrices/GOV.md",
    )


@pytest.mark.parametrize(
    "name,shown", [("a\x01.md", "a\\x01.md"), ("b\nc.md", "b\\x0ac.md"), ("\x1b[31m.md", "\\x1b[31m.md")]
)
def test_dc004_a_file_name_with_a_control_character(repo: GitRepo, name: str, shown: str):
    sha = repo.commit("Notes\n\nRow: GOV-CORE\n", {f"docs/{name}": "d\n"})
    result = _run(repo)
    assert [(f.rule, f.path, f.message) for f in result.findings] == [
        ("DC004", None, f"commit {sha[:12]} changes docs/{shown}, a file name with a control character or newline")
    ]
    assert result.findings[0].hint == "rename the file (`git mv`) to a name of printable characters"


def test_dc004_good_twin_and_the_engine_change_beside_it_is_still_judged(repo: GitRepo):
    repo.commit("Notes\n\nRow: GOV-CORE\n", {"docs/a.md": "d\n"})
    assert _run(repo).status.value == "pass"
    repo.commit("Both\n\nRow: GOV-CORE\n", {"docs/a\x01.md": "d\n", "engine/x.py": "x\n"})
    assert [f.rule for f in _run(repo).findings] == ["DC004", "DC003"]


def test_state_change_with_render_passes(repo: GitRepo):
    repo.write({".agents/rows/GOV-CORE.yaml": row_yaml("GOV-CORE", state="INVENTORIED")})
    _render(repo)
    repo.commit("Start it\n\nRow: GOV-CORE\n")
    assert _run(repo).status.value == "pass"


def test_dc003_engine_change_without_bench(repo: GitRepo):
    sha = repo.commit("Faster kernel\n\nRow: GOV-CORE\n", {"engine/op.py": "x = 1\n", "engine/k.cu": "//\n"})
    [f] = _run(repo).findings
    assert (f.rule, f.message) == (
        "DC003",
        f"commit {sha[:12]} changes engine code (engine/k.cu (+1 more)) but "
        "updates neither docs/BENCHMARKS.md nor a ledger entry of GOV-CORE, "
        "and has no Bench-Impact: trailer",
    )


@pytest.mark.parametrize(
    "message, files",
    [
        ("Refactor\n\nBench-Impact: none (renames only)\nRow: GOV-CORE\n", {}),
        ("Faster\n\nRow: GOV-CORE\n", {"docs/BENCHMARKS.md": "| x | 1.2x |\n"}),
        (
            "Faster\n\nRow: GOV-CORE\n",
            {
                ".agents/ledger/2026-11-29-x.json": json.dumps(
                    {
                        "schema": 1,
                        "date": "2026-11-29",
                        "kind": "bench",
                        "rows": ["GOV-CORE"],
                        "command": "x",
                        "summary": "s",
                    }
                )
            },
        ),
    ],
    ids=["trailer", "benchmarks", "ledger"],
)
def test_engine_change_with_a_note_passes(repo: GitRepo, message, files):
    repo.commit(message, {"engine/op.py": "x = 2\n", **files})
    assert _run(repo).status.value == "pass"


def test_engine_change_before_the_range_start_is_not_judged(repo: GitRepo):
    repo.commit("Faster\n\nRow: GOV-CORE\n", {"engine/op.py": "x = 3\n"})
    base = repo.head()
    assert _run(repo, base=base).status.value == "pass"


def test_render_check_fails_with_a_diff_then_render_fixes_it(repo: GitRepo, capsys):
    from checkers.cli import main

    repo.write({"engine/flags.py": FLAGS + 'declare("VT_NEW", True, "GOV-CORE", "new")\n'})
    assert main(["render", "--check", "--repo", str(repo.path)]) == 1
    out, err = capsys.readouterr()
    assert "+| `VT_NEW` | ON | GOV-CORE | new |\n" in out
    assert err == "rowgate: 1 of 4 rendered files are out of date: docs/ENVIRONMENT.md; run `rowgate render`\n"
    assert main(["render", "--repo", str(repo.path)]) == 0
    assert capsys.readouterr().out == "wrote docs/ENVIRONMENT.md\nOK: 4 rendered files, 1 updated\n"
    assert main(["render", "--check", "--repo", str(repo.path)]) == 0
    assert capsys.readouterr().out == "OK: 4 rendered files are up to date\n"


def test_unparsable_flag_registry_is_an_error(repo: GitRepo):
    from checkers.preflight import run_check
    from checkers.registry import get

    repo.write({"engine/flags.py": "declare(NAME, False, 'GOV-CORE', 'x')\n"})
    ctx = Context(root=repo.path, config=load_config(repo.path), env={})
    result = run_check(get("doc-checkpoint"), ctx, argparse.Namespace(base=None, head=None))
    assert (result.status.value, result.summary, result.hint) == (
        "error",
        "cannot render docs/ENVIRONMENT.md: engine/flags.py:1: declare() takes literal name, default, gates, doc",
        "declare flags with literal name, default, gates and doc",
    )


def test_without_a_cutover_or_a_base_only_the_rendered_files_are_checked(rowgate_repo: GitRepo):
    """No cutover, no docs.since and no --base: Context.range() has no range (NoRange), and the check still
    judges the rendered files rather than failing or inventing a range."""
    rowgate_repo.write({"engine/flags.py": FLAGS})
    _render(rowgate_repo)
    rowgate_repo.commit("Render\n\nRow: GOV-CORE\n")
    result = _run(rowgate_repo)
    assert (result.status.value, result.summary, result.examined) == (
        "pass",
        "OK: 4 rendered files up to date; 0 commits checked",
        4,
    )


# --- checkpoint path rules (DC005), on the excerpt of vllm.cpp's records -------------------------------


def _doc_checkpoint(repo, base: str):
    return doc_checkpoint.run(
        Context(root=repo.path, config=load_config(repo.path)), argparse.Namespace(base=base, head="HEAD")
    )


def test_a_checkpoint_commit_without_its_documents_is_a_finding(tmp_path: Path):
    repo = excerpt_repo(tmp_path / "repo")
    base = repo.head()
    sha = repo.commit("state: note", {".agents/state.md": "## 2026-07-24\n", "README.md": "# vllm.cpp\n"})
    result = _doc_checkpoint(repo, base)
    assert [(f.rule, f.message) for f in result.findings] == [
        (
            "DC005",
            f"commit {sha[:12]} changes feature checkpoint paths (.agents/state.md) but does not update "
            "docs/BENCHMARKS.md in the same change",
        )
    ]


def test_a_checkpoint_commit_with_its_documents_passes(tmp_path: Path):
    repo = excerpt_repo(tmp_path / "repo")
    base = repo.head()
    files = {".agents/state.md": "x\n", "src/a.cpp": "x\n", "README.md": "r\n", "docs/BENCHMARKS.md": "b\n"}
    repo.commit("feat: checkpoint", files)
    repo.commit("chore: not a checkpoint", {"notes.txt": "x\n"})
    result = _doc_checkpoint(repo, base)
    assert (result.status.value, result.summary) == ("pass", "OK: 0 rendered files up to date; 2 commits checked")


@pytest.mark.parametrize(
    "attributes",
    [".agents/rows/*.yaml binary\n", ".agents/rows/*.yaml diff=hide\n", ".agents/rows/*.yaml -diff\n"],
)
def test_dc002_committed_attributes_cannot_hide_a_state_change(repo: GitRepo, attributes: str):
    """The branch marks the rows binary (or routes them to a textconv that hides the state line): `git log
    -p` then prints "Binary files differ" or the textconv's output. State changes are read from the blobs,
    so the change is still seen."""
    repo.commit("Attributes\n\nRow: GOV-CORE\n", {".gitattributes": attributes})
    repo.git("config", "diff.hide.textconv", "grep -v state")
    sha = repo.commit(
        "Start it\n\nRow: GOV-CORE\n", {".agents/rows/GOV-CORE.yaml": row_yaml("GOV-CORE", state="INVENTORIED")}
    )
    _render(repo)
    repo.commit("Render later\n\nRow: GOV-CORE\n")
    assert [(f.rule, f.message) for f in _run(repo).findings] == [
        (
            "DC002",
            f"commit {sha[:12]} moves GOV-CORE from READY to INVENTORIED but "
            "does not update docs/ROADMAP.md, docs/matrices/GOV.md",
        )
    ]
