"""`rowgate init`: a config chosen from the repository's history and layout, every choice printed with its
reason; after it and a commit, `rowgate preflight` is green. Real temporary repositories throughout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from checkers.commands import init
from checkers.config import parse_config
from tests.conftest import GIT_ENV, ROOT, GitRepo, init_repo

SIGNED = "\n\nSigned-off-by: Ada Tester <ada@example.com>\n"


def rowgate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "checkers", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin:/usr/local/bin", **GIT_ENV},
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )


@pytest.fixture
def signed(tmp_path: Path) -> GitRepo:
    repo = init_repo(tmp_path / "proj")
    for i in range(5):
        repo.commit(
            f"Change {i}{SIGNED}", {f"src/m{i}.py": f"x = {i}\n", "docs/a.md": f"{i}\n", "Makefile": f"all: {i}\n"}
        )
    return repo


def test_init_then_a_commit_then_preflight_is_green(signed: GitRepo):
    proc = rowgate("init", cwd=signed.path)  # stdin is not a terminal: no question asked
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert "  presets [dco]: 5 of 5 commits signed off by their author" in out
    assert "  src/: class src, budget 1000 lines" in out
    assert "  agent-record     disabled: no records in .agents/rows/ (the rows workflow is not used here)" in out
    assert "  commit-trailers  enabled: presets dco" in out
    assert out[-1] == (
        "wrote .agents/config.yaml; commit it (git add .agents/config.yaml && git commit -s), "
        "then run `rowgate preflight`"
    )
    config = parse_config((signed.path / ".agents/config.yaml").read_bytes())
    assert (config.trailers.presets, config.cutover) == (["dco"], signed.head())
    assert (config.trailers.default_range, config.trailers.merges) == ("cutover", "contract")
    assert [c.name for c in config.pr_size.classes] == ["agents", "docs", "src", "top-level"]
    assert not config.checks["gencode"].enabled and "commit-trailers" not in config.checks
    signed.commit("Add the rowgate config" + SIGNED)
    proc = rowgate("preflight", cwd=signed.path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1].startswith("All gates green (2 gates")


def test_init_refuses_to_replace_a_config_and_dry_run_prints_it(signed: GitRepo):
    signed.write({".agents/config.yaml": "version: 1\n"})
    proc = rowgate("init", cwd=signed.path)
    assert proc.returncode == 2 and "exists; nothing written" in proc.stderr
    assert (signed.path / ".agents/config.yaml").read_text() == "version: 1\n"
    dry = rowgate("init", "--dry-run", cwd=signed.path)
    assert dry.returncode == 0 and dry.stdout.startswith("# rowgate configuration for proj")
    assert "trailers:\n  presets: [dco]\n" in dry.stdout
    assert rowgate("init", "--force", cwd=signed.path).returncode == 0
    assert "presets: [dco]" in (signed.path / ".agents/config.yaml").read_text()


def test_older_commits_that_break_the_presets_go_before_a_cutover(tmp_path: Path):
    repo = init_repo(tmp_path / "mixed")
    repo.commit("Old and unsigned\n", {"a.txt": "a\n"})
    for i in range(9):
        repo.commit(f"Signed {i}{SIGNED}", {"a.txt": f"{i}\n"})
    head = repo.head()
    assert rowgate("init", cwd=repo.path).returncode == 0
    config = parse_config((repo.path / ".agents/config.yaml").read_bytes())
    assert (config.trailers.presets, config.cutover) == (["dco"], head)
    repo.commit("Add the config" + SIGNED)
    assert rowgate("preflight", cwd=repo.path).returncode == 0
    repo.commit("Unsigned after init\n")
    proc = rowgate("preflight", cwd=repo.path)  # the contract holds from the cutover on
    assert proc.returncode == 1 and "TR001 trailer-missing" in proc.stdout


def test_no_convention_in_the_history_disables_the_trailer_check(tmp_path: Path):
    repo = init_repo(tmp_path / "bare")
    repo.commit("One\n", {"x/a.txt": "a\n"})
    plan = init.detect(repo.path)
    assert plan.disabled["commit-trailers"].startswith(
        "no trailer convention in the history (0 of 1 commits signed off by their author;"
    )


def test_presets_from_protocol_and_row_trailers(tmp_path: Path):
    repo = init_repo(tmp_path / "rows")
    repo.write({".agents/rows/GOV-A.yaml": "id: GOV-A\n"})
    for i in range(3):
        repo.commit(f"C{i}\n\nFOLLOWING_AGENTS_PROTOCOL\n\nRow: GOV-A\nAssisted-by: a:b [c]\n")
    plan = init.detect(repo.path)
    trailers = plan.section("trailers")
    assert trailers is not None and trailers.value == {
        "presets": ["row", "agents-protocol"],
        "default_range": "cutover",
        "cutover_judged": "legacy",
        "exempt_authors": list(init.BOT_AUTHORS),
        # the three lack the preset's Following-Agents-Protocol and AI-Assisted trailers but keep its marker
        "legacy": {"paragraphs": [{"pattern": "FOLLOWING_AGENTS_PROTOCOL", "whole": True, "max": None}]},
    }
    assert "agent-record" not in plan.disabled  # there are records


def test_gencode_from_cuda_sources_a_table_and_compile_commands(tmp_path: Path):
    repo = init_repo(tmp_path / "cuda")
    repo.commit("k\n", {"kern/a.cu": "//\n", "kern/arch_features.yaml": "features: {}\n"})
    (repo.path / "build").mkdir()
    (repo.path / "build/compile_commands.json").write_text("[]\n")
    plan = init.detect(repo.path)
    section = plan.section("gencode")
    assert section is not None and section.value == {
        "table": "kern/arch_features.yaml",
        "compile_commands": "build/compile_commands.json",
    }
    bare = init_repo(tmp_path / "cuda2")
    bare.commit("k\n", {"kern/a.cu": "//\n"})
    assert init.detect(bare.path).disabled["gencode"] == (
        "1 CUDA sources but no arch feature table (arch_features.yaml) to compare their -gencode flags with"
    )


def test_layout_detectors_are_called_through_one_list(tmp_path: Path):
    class Found:
        def __init__(self, config: dict[str, object], reasons: list[str]):
            self.config, self.reasons = config, reasons

    plan = init.Plan()
    plan.sections.append(init.Section("pr_size", {"classes": []}, ["classes"]))
    calls: list[str] = []

    def detector(name: str, found: Found | None):
        def run(root: Path) -> Found | None:
            calls.append(name)
            return found

        return run

    init._layout(
        tmp_path,
        plan,
        {
            "env_doc": detector("env_doc", Found({"doc": "ENV.md"}, ["env table ENV.md"])),
            "gemv_invocation": detector("gemv_invocation", None),
            "pr_size_pairs": detector(
                "pr_size_pairs", Found({"pairs": [{"name": "t", "when": "a/{n}.py", "require": "t/{n}.py"}]}, ["pairs"])
            ),
        },
    )
    assert calls == [fn for _, _, fn in init.DETECTORS]
    assert plan.section("env_doc").value == {"doc": "ENV.md"}  # type: ignore[union-attr]
    assert plan.section("pr_size").value["pairs"][0]["name"] == "t"  # type: ignore[union-attr,index]
    assert plan.disabled["gemv-invocation"] == "no matmul/GEMV call sites found"
    text = init.render(plan, tmp_path)
    assert "# env table ENV.md\nenv_doc:\n  doc: ENV.md\n" in text


def test_the_layout_detectors_of_checkers_detect_layout_are_wired(tmp_path: Path):
    detectors = init._load_detectors()
    assert sorted(detectors) == sorted(fn for _, _, fn in init.DETECTORS)
    repo = init_repo(tmp_path / "envs")
    repo.commit(
        "e\n",
        {
            "docs/ENV.md": "| Variable | meaning |\n|---|---|\n| `VT_FOO` | a switch |\n",
            "src/a.py": "import os\nFOO = os.environ.get('VT_FOO')\n",
        },
    )
    plan = init.detect(repo.path)
    section = plan.section("env_doc")
    assert section is not None and "VT_" in section.value["prefixes"]  # type: ignore[index]
    assert "env-doc" in plan.enabled and "env-doc" not in plan.disabled


def test_fixtures_under_tests_are_not_taken_for_the_build(tmp_path: Path):
    repo = init_repo(tmp_path / "fx")
    repo.commit(
        "k\n",
        {
            "kern/a.cu": "//\n",
            "kern/arch_features.yaml": "features: {}\n",
            "tests/fixtures/compile_commands.json": "[]\n",
        },
    )
    section = init.detect(repo.path).section("gencode")
    assert section is not None and section.value == {"table": "kern/arch_features.yaml"}


def test_a_head_that_breaks_the_presets_is_judged_by_the_legacy_rule(tmp_path: Path):
    """init's cutover is the HEAD it found; when that commit itself breaks the presets it must not fail them."""
    repo = init_repo(tmp_path / "late")
    for i in range(9):
        repo.commit(f"Signed {i}{SIGNED}", {"a.txt": f"{i}\n"})
    repo.commit("Unsigned head\n", {"a.txt": "head\n"})
    head = repo.head()
    assert rowgate("init", cwd=repo.path).returncode == 0
    config_file = repo.path / ".agents/config.yaml"
    config = parse_config(config_file.read_bytes())
    assert (config.cutover, config.trailers.cutover_judged) == (head, "legacy")
    repo.commit("Add the config" + SIGNED)
    assert rowgate("preflight", cwd=repo.path).returncode == 0
    # the seeded twin: the cutover judged by the contract fails on that very commit
    strict = config_file.read_text().replace("cutover_judged: legacy", "cutover_judged: contract")
    config_file.write_text(strict.replace("default_range: cutover", "default_range: base"))  # the cutover in range
    repo.commit("Judge the cutover strictly" + SIGNED)
    proc = rowgate("preflight", cwd=repo.path)
    assert proc.returncode == 1 and f"{head[:12]}: no Signed-off-by trailer" in proc.stdout


def test_evidence_is_enabled_where_a_ledger_is_and_disabled_where_none_is(tmp_path: Path):
    repo = init_repo(tmp_path / "ledger")
    repo.commit("One\n", {"x/a.txt": "a\n"})
    assert init.detect(repo.path).disabled["evidence"] == (
        "no ledger records in .agents/ledger/ (no numbers to hold to a record)"
    )
    repo.commit("Two\n", {".agents/ledger/2026-01-01-run.json": "{}\n"})
    plan = init.detect(repo.path)
    assert (plan.enabled["evidence"], "evidence" in plan.disabled) == ("the 1 ledger records in .agents/ledger/", False)
