"""gemv-invocation's cuBLASLt rule set: a translation unit shaped like a foreign engine's cuBLASLt matmul file
fails on each bare `/*requestedAlgoCount=*/1` (on the marker's line), on a hard-coded C/D layout dtype, a runtime
algo count and an unmarked one; the named-constant twin passes with its site count."""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from checkers.checks import gemv_invocation as gv
from checkers.config import Config, CublasLtRules, GemvConfig
from checkers.context import Context
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "gemv"
BAD = "cublaslt-literal-algo-count.cu"
GOOD = "cublaslt-literal-algo-count-good.cu"
REL = "src/vt/cuda/cuda_matmul.cu"
HINT = ("declare `constexpr int kName = 1;` once and pass `/*requestedAlgoCount=*/kName` (gemv.cublaslt.algo_constants "
        "lists the allowed names)")
WHERE = "cublasLtMatmulAlgoGetHeuristic's requestedAlgoCount"


def tree(tmp_path: Path, fixture: str) -> Path:
    (tmp_path / REL).parent.mkdir(parents=True)
    shutil.copy(FIXTURES / fixture, tmp_path / REL)
    return tmp_path


def run_on(root: Path, **rules: object) -> gv.Result:
    cfg = Config(gemv=GemvConfig(python=[], cuda=["src/**/*.cu"], rule_sets=["cublaslt"],
                                 cublaslt=CublasLtRules(**rules)))  # type: ignore[arg-type]
    return gv.run(Context(root=root, config=cfg), argparse.Namespace(min_sites=None))


def mutate(root: Path, old: str, new: str, count: int = 1) -> int:
    path = root / REL
    text = path.read_text()
    assert text.count(old) >= count, f"the site to mutate ({old!r}) moved; update this test"
    path.write_text(text.replace(old, new, count))
    return text[:text.index(old)].count("\n") + 1


def found(result: gv.Result) -> list[tuple[str, str | None, int | None, str]]:
    return [(f.rule, f.path, f.line, f.message) for f in result.findings]


def test_four_bare_literal_algo_counts_fail_on_their_marker_lines(tmp_path: Path):
    result = run_on(tree(tmp_path, BAD))
    assert result.status.value == "fail"
    assert found(result) == [("GV006", REL, line, f"{WHERE} is the bare literal 1, not a named constant")
                             for line in (26, 38, 50, 62)]
    assert {f.hint for f in result.findings} == {HINT}


def test_the_named_constant_twin_passes_and_counts_layouts_and_queries(tmp_path: Path):
    result = run_on(tree(tmp_path, GOOD))
    assert result.status.value == "pass", found(result)
    assert result.examined == 8  # four C/D layouts (lc, &lc.v, batched lc, &p.lc) and four heuristic queries


def test_the_engine_rule_set_alone_does_not_judge_algo_counts(tmp_path: Path):
    """The reason the rule set exists: the launch rules take 1 as structural, so they pass the bare literals."""
    cfg = Config(gemv=GemvConfig(python=[], cuda=["src/**/*.cu"]))
    result = gv.run(Context(root=tree(tmp_path, BAD), config=cfg), argparse.Namespace(min_sites=None))
    assert [f for f in result.findings if f.rule == "GV006"] == []


def test_a_hard_coded_output_layout_dtype_fails(tmp_path: Path):
    root = tree(tmp_path, GOOD)
    line = mutate(root, "MakeRowMajor(lc, out_type, m, n);", "MakeRowMajor(lc, CUDA_R_32F, m, n);")
    assert found(run_on(root)) == [("GV005", REL, line, ("MakeRowMajor creates the C/D layout lc with the literal "
                                    "CUDA_R_32F, not the caller's out dtype (out_type)"))]


def test_a_raw_output_layout_from_the_operand_dtype_fails(tmp_path: Path):
    root = tree(tmp_path, GOOD)
    line = mutate(root, "cublasLtMatrixLayoutCreate(&p.lc, out_type,", "cublasLtMatrixLayoutCreate(&p.lc, a_type,")
    assert found(run_on(root)) == [("GV005", REL, line, ("cublasLtMatrixLayoutCreate creates the C/D layout &p.lc "
                                    "with the expression a_type, not the caller's out dtype (out_type)"))]


def test_a_runtime_algo_count_fails(tmp_path: Path):
    root = tree(tmp_path, GOOD)
    line = mutate(root, "/*requestedAlgoCount=*/kGemvHeuristicAlgos, &p.heur", "/*requestedAlgoCount=*/n_algos, &p.heur")
    assert found(run_on(root)) == [("GV006", REL, line, (f"{WHERE} is n_algos, a runtime value: no constexpr or "
                                    f"#define of n_algos in {REL} or its includes"))]


def test_an_unmarked_algo_count_fails(tmp_path: Path):
    root = tree(tmp_path, GOOD)
    line = mutate(root, "/*requestedAlgoCount=*/kGemvHeuristicAlgos, &p.heur", "kGemvHeuristicAlgos, &p.heur")
    assert found(run_on(root)) == [("GV006", REL, line, (f"{WHERE} argument (kGemvHeuristicAlgos) lacks the "
                                    "/*requestedAlgoCount=*/ marker"))]


def test_a_name_off_the_policy_list_fails(tmp_path: Path):
    root = tree(tmp_path, GOOD)
    line = mutate(root, "constexpr int kGemvHeuristicAlgos = 1;",
                  "constexpr int kGemvHeuristicAlgos = 1;\nconstexpr int kSearch = 8;")
    second = mutate(root, "/*requestedAlgoCount=*/kGemvHeuristicAlgos, &p.heur", "/*requestedAlgoCount=*/kSearch, &p.heur")
    assert line == 2
    assert found(run_on(root, algo_constants=["kGemvHeuristicAlgos"])) == [
        ("GV006", REL, second, f"{WHERE} is kSearch, which is not one of the policy constants (kGemvHeuristicAlgos)")]
    assert found(run_on(root)) == []  # with no list, any declared constant is a policy


def test_a_constant_declared_twice_fails(tmp_path: Path):
    root = tree(tmp_path, GOOD)
    mutate(root, "constexpr int kGemvHeuristicAlgos = 1;",
           "constexpr int kGemvHeuristicAlgos = 1;\nconstexpr int kGemvHeuristicAlgos = 2;")
    result = run_on(root)
    assert {f.rule for f in result.findings} == {"GV003"} and len(result.findings) == 4
    assert result.findings[0].message == (
        f"tuning constant kGemvHeuristicAlgos used by cublasLtMatmulAlgoGetHeuristic is declared 2 times ({REL}:2, "
        f"{REL}:3): declare it once")


@pytest.mark.parametrize("text,examined", [("", 0), ("int f() { return g(1, 2); }\n", 0)])
def test_a_unit_without_cublaslt_sites_examines_nothing(tmp_path: Path, text: str, examined: int):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "x.cu").write_text(text)
    result = run_on(tmp_path)
    assert result.examined == examined and result.status.value == "fail"
    assert [f.rule for f in result.findings] == ["GV004"]
