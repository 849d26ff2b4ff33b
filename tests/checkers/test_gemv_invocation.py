"""gemv-invocation: each rule fails on a seeded violation with exactly its message (fixtures, and mutations of a
copy of the real engine sources), its good twin passes, and the unmutated engine passes with its site count."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from checkers.checks import gemv_invocation as gv
from checkers.config import Config, CublasLtRules, GemvConfig
from checkers.contentcache import CACHE_DIR
from checkers.context import Context
from tests.conftest import ROOT, stage

FIXTURES = ROOT / "tests" / "fixtures" / "gemv"
# Call and launch sites of sources whose sites this row owns or which are stable: a drop means a site is missed.
SNAPSHOT = {
    "engine/cuda/norm.cu": 2,
    "engine/cuda/rope.cu": 5,
    "engine/cuda/act.cu": 1,
    "engine/cuda/sample.cu": 3,
    "engine/cuda/gemv.cu": 3,
    "engine/ops/gemv.py": 1,
    "engine/model/layers.py": 3,
}
A1 = "take the output dtype from the caller (x.dtype or an out_dtype argument), never float32"
A2 = "declare it once as a named constant (constexpr in the .cuh/.cu, a module constant in Python) and use the name"


def fixture(*names: str) -> tuple[list[gv.Source], list[gv.Source]]:
    srcs = [gv.Source(f"tests/fixtures/gemv/{n}", (FIXTURES / n).read_text()) for n in names]
    return [s for s in srcs if s.path.endswith(".py")], [s for s in srcs if not s.path.endswith(".py")]


def findings_of(*names: str) -> list[tuple]:
    findings, _ = gv.check_sources(*fixture(*names), min_sites=1)
    return [(f.rule, f.path, f.line, f.message, f.hint) for f in findings]


@pytest.fixture
def engine_copy(tmp_path: Path) -> Path:
    """A copy of the real engine's Python and CUDA sources in a fresh root."""

    def skip(folder: str, names: list[str]) -> list[str]:
        return [
            n
            for n in names
            if n == "__pycache__" or ((Path(folder) / n).is_file() and not n.endswith((".py", ".cu", ".cuh")))
        ]

    shutil.copytree(ROOT / "engine", tmp_path / "engine", ignore=skip)
    return tmp_path


def run_on(root: Path, min_sites: int = 1):
    stage(root)
    ctx = Context(root=root, config=Config())
    return gv.run(ctx, argparse.Namespace(min_sites=min_sites))


def mutate(root: Path, rel: str, old: str, new: str) -> int:
    """Replace the one occurrence of `old` in root/rel; return the line the mutation starts on."""
    path = root / rel
    text = path.read_text()
    assert text.count(old) == 1, f"{rel}: the site to mutate ({old!r}) moved; update this test"
    path.write_text(text.replace(old, new))
    return text[: text.index(old)].count("\n") + 1


def test_unmutated_engine_passes_and_counts_its_sites(engine_copy: Path):
    result = run_on(engine_copy)
    assert result.status.value == "pass", [f.message for f in result.findings]
    assert (
        result.summary == f"OK: {result.examined} matmul/GEMV call and kernel launch sites keep the caller's dtype "
        "and named tuning constants"
    )
    sources = [gv.Source(rel, (engine_copy / rel).read_text()) for rel in SNAPSHOT]
    raw = {s.path: s.text for s in sources}
    counts = {s.path: (gv.check_python(s) if s.path.endswith(".py") else gv.check_cuda(s, raw))[1] for s in sources}
    assert counts == SNAPSHOT
    assert result.examined >= sum(SNAPSHOT.values())


# Linear.forward's call (MergedLinear.forward makes the same call on its merged weight)
LINEAR_SITE = "return self.reduced(kernels.linear(flags, x, self.weight, self.bias))"


@pytest.mark.parametrize(
    "rel,old,new,rule,message",
    [
        (
            "engine/model/layers.py",
            LINEAR_SITE,
            LINEAR_SITE.replace("self.bias))", "self.bias, out_dtype=torch.float32))"),
            "GV001",
            "engine.kernels.linear is called with out_dtype=torch.float32: the output dtype must come from the caller's "
            "out dtype",
        ),
        (
            "engine/ops/gemv.py",
            "F.linear(x, weight, bias)",
            "F.linear(x.float(), weight, bias)",
            "GV001",
            "torch.nn.functional.linear operand 1 is upcast with .float(): the output dtype must come from the caller's "
            "out dtype",
        ),
        (
            "engine/cuda/gemv.cu",
            "gemv_scalar_kernel<T, OutT><<<",
            "gemv_scalar_kernel<T, float><<<",
            "GV001",
            "GEMV launch vt_gemv::gemv_scalar_kernel takes float as its output template argument: the output type must be a "
            "template parameter chosen from the caller's out dtype",
        ),
        (
            "engine/cuda/norm.cu",
            "<<<a.rows, vt_norm::kThreadsPerBlock, 0, stream>>>(\n      static_cast<T*>(a.out), "
            "static_cast<const T*>(a.x)",
            "<<<a.rows, 256, 0, stream>>>(\n      static_cast<T*>(a.out), static_cast<const T*>(a.x)",
            "GV002",
            "launch of vt_norm::rms_norm_kernel has the bare literal 256 in its block (256): a tuning parameter must be a "
            "named constant",
        ),
        (
            "engine/cuda/act.cu",
            "vt_act::kThreadsPerBlock, 0, stream>>>",
            "vt_act::kThreadsPerBlock, 1024, stream>>>",
            "GV002",
            "launch of vt_act::silu_and_mul_kernel has the bare literal 1024 in its shared memory (1024): a tuning "
            "parameter must be a named constant",
        ),
        (
            "engine/model/layers.py",
            LINEAR_SITE,
            LINEAR_SITE.replace("self.bias)", "self.bias, num_splits=4)"),
            "GV002",
            "engine.kernels.linear is called with num_splits=4: a tuning parameter must be a named constant",
        ),
    ],
)
def test_mutated_engine_fails_with_the_message(engine_copy: Path, rel, old, new, rule, message):
    line = mutate(engine_copy, rel, old, new)
    result = run_on(engine_copy)
    assert result.status.value == "fail"
    assert [(f.rule, f.path, f.line, f.message) for f in result.findings] == [(rule, rel, line, message)]


def test_a_second_declaration_of_a_launch_constant_fails(engine_copy: Path):
    line = mutate(
        engine_copy,
        "engine/cuda/act.cu",
        "constexpr int kMaxGridY = 65535;",
        "constexpr int kMaxGridY = 65535;\nconstexpr int kThreadsPerBlock = 128;",
    )
    launch = (engine_copy / "engine/cuda/act.cu").read_text().split("<<<")[0].count("\n") + 1
    header_text = (engine_copy / "engine/cuda/act.cuh").read_text()
    header = header_text.split("constexpr int kThreadsPerBlock")[0].count("\n") + 1
    [f] = run_on(engine_copy).findings
    assert (f.rule, f.path, f.line, f.message) == (
        "GV003",
        "engine/cuda/act.cu",
        launch,
        f"tuning constant kThreadsPerBlock used by the launch of vt_act::silu_and_mul_kernel is declared 2 times "
        f"(engine/cuda/act.cu:{line + 1}, engine/cuda/act.cuh:{header}): declare it once",
    )


def test_fewer_sites_than_the_minimum_fails(engine_copy: Path):
    result = run_on(engine_copy, min_sites=100_000)
    [f] = result.findings
    assert (f.rule, f.message) == (
        "GV004",
        f"examined {result.examined} call and launch sites, fewer than the configured minimum 100000",
    )


def test_a_tree_without_engine_sources_fails(tmp_path: Path):
    result = run_on(tmp_path)
    assert result.status.value == "fail" and result.examined == 0
    assert [f.message for f in result.findings] == [
        "examined 0 call and launch sites, fewer than the configured minimum 1"
    ]


def test_float32_output_keyword():
    assert findings_of("float32-output-kwarg.py") == [
        (
            "GV001",
            "tests/fixtures/gemv/float32-output-kwarg.py",
            8,
            "engine.cuda.gemv.linear is called with out_dtype=torch.float32: the output dtype must come from the "
            "caller's out dtype",
            A1,
        )
    ]


def test_float32_upcast_operands():
    path = "tests/fixtures/gemv/float32-upcast-operand.py"
    assert findings_of("float32-upcast-operand.py") == [
        (
            "GV001",
            path,
            7,
            "`@` operand 1 is upcast with .float(): the output dtype must come from the caller's out dtype",
            A1,
        ),
        (
            "GV001",
            path,
            11,
            "torch.nn.functional.linear operand 1 is upcast with .to(torch.float32): the output "
            "dtype must come from the caller's out dtype",
            A1,
        ),
    ]


def test_float_output_template_argument():
    assert findings_of("float-output-template.cu") == [
        (
            "GV001",
            "tests/fixtures/gemv/float-output-template.cu",
            9,
            "GEMV launch gemv_kernel takes float as its output template argument: the output type must be a template "
            "parameter chosen from the caller's out dtype",
            A1,
        )
    ]


def test_literal_launch_config():
    path = "tests/fixtures/gemv/literal-launch-config.cu"
    msg = "launch of scale_kernel has the bare literal {} in its {}: a tuning parameter must be a named constant"
    assert findings_of("literal-launch-config.cu") == [
        ("GV002", path, 5, msg.format(127, "grid ((n + 127) / 128)"), A2),
        ("GV002", path, 5, msg.format(128, "grid ((n + 127) / 128)"), A2),
        ("GV002", path, 5, msg.format(128, "block (128)"), A2),
        ("GV002", path, 5, msg.format(4096, "shared memory (4096)"), A2),
    ]


def test_heuristic_algo_count_and_cublas_float32_output():
    path = "tests/fixtures/gemv/heuristic-literal-algo-count.cu"
    assert findings_of("heuristic-literal-algo-count.cu") == [
        (
            "GV002",
            path,
            4,
            "call of cublasLtMatmulAlgoGetHeuristic has the bare literal 8 in its argument 8 (8): a "
            "tuning parameter must be a named constant",
            A2,
        ),
        (
            "GV001",
            path,
            9,
            "cublasGemmEx writes a CUDA_R_32F output from CUDA_R_16BF operands: the output type must "
            "come from the caller's out dtype",
            A1,
        ),
    ]


def test_python_literal_and_twice_declared_tuning_keywords():
    assert findings_of("literal-tuning-kwarg.py") == [
        (
            "GV002",
            "tests/fixtures/gemv/literal-tuning-kwarg.py",
            6,
            "engine.cuda.gemv.linear is called with num_splits=4: a tuning parameter must be a named constant",
            A2,
        )
    ]
    path = "tests/fixtures/gemv/constant-declared-twice.py"
    assert findings_of("constant-declared-twice.py") == [
        (
            "GV003",
            path,
            9,
            f"tuning constant NUM_SPLITS passed as num_splits to engine.cuda.gemv.linear is declared "
            f"2 times ({path}:4, {path}:5): declare it once",
            A2,
        )
    ]


def test_cuda_constant_declared_in_header_and_source():
    path = "tests/fixtures/gemv/constant-declared-twice.cu"
    assert findings_of("constant-declared-twice.cu", "constant-declared-twice.cuh") == [
        (
            "GV003",
            path,
            6,
            f"tuning constant kThreads used by the launch of scale_kernel is declared 2 times "
            f"({path}:4, tests/fixtures/gemv/constant-declared-twice.cuh:3): declare it once",
            A2,
        )
    ]


@pytest.mark.parametrize(
    "names",
    [
        ("float32-output-kwarg-good.py",),
        ("float32-upcast-operand-good.py",),
        ("literal-tuning-kwarg-good.py",),
        ("float-output-template-good.cu",),
        ("literal-launch-config-good.cu",),
        ("heuristic-literal-algo-count-good.cu",),
        ("constant-declared-twice-good.cu", "constant-declared-twice.cuh"),
    ],
)
def test_good_twins_pass(names):
    findings, sites = gv.check_sources(*fixture(*names), min_sites=1)
    assert findings == [] and sites >= 1


# --- the cuBLASLt rule set: a translation unit shaped like a foreign engine's cuBLASLt matmul file fails on each
# bare `/*requestedAlgoCount=*/1` (on the marker's line), a hard-coded C/D layout dtype, a runtime algo count
# and an unmarked one; the named-constant twin passes with its site count.

LT_BAD = "cublaslt-literal-algo-count.cu"
LT_GOOD = "cublaslt-literal-algo-count-good.cu"
LT_REL = "src/vt/cuda/cuda_matmul.cu"
LT_HINT = (
    "declare `constexpr int kName = 1;` once and pass `/*requestedAlgoCount=*/kName` (gemv.cublaslt.algo_constants "
    "lists the allowed names)"
)
LT_WHERE = "cublasLtMatmulAlgoGetHeuristic's requestedAlgoCount"


def lt_tree(tmp_path: Path, fixture: str) -> Path:
    (tmp_path / LT_REL).parent.mkdir(parents=True)
    shutil.copy(FIXTURES / fixture, tmp_path / LT_REL)
    stage(tmp_path)  # the check lists the repository's files from git (Context.files)
    return tmp_path


def lt_run(root: Path, **rules: object) -> gv.Result:
    stage(root)  # and a mutation since lt_tree is in the index too
    cfg = Config(
        gemv=GemvConfig(python=[], cuda=["src/**/*.cu"], rule_sets=["cublaslt"], cublaslt=CublasLtRules(**rules))
    )  # type: ignore[arg-type]
    stage(root)
    return gv.run(Context(root=root, config=cfg), argparse.Namespace(min_sites=None))


def lt_mutate(root: Path, old: str, new: str, count: int = 1) -> int:
    path = root / LT_REL
    text = path.read_text()
    assert text.count(old) >= count, f"the site to mutate ({old!r}) moved; update this test"
    path.write_text(text.replace(old, new, count))
    return text[: text.index(old)].count("\n") + 1


def lt_found(result: gv.Result) -> list[tuple[str, str | None, int | None, str]]:
    return [(f.rule, f.path, f.line, f.message) for f in result.findings]


def test_four_bare_literal_algo_counts_fail_on_their_marker_lines(tmp_path: Path):
    result = lt_run(lt_tree(tmp_path, LT_BAD))
    assert result.status.value == "fail"
    assert lt_found(result) == [
        ("GV006", LT_REL, line, f"{LT_WHERE} is the bare literal 1, not a named constant") for line in (26, 38, 50, 62)
    ]
    assert {f.hint for f in result.findings} == {LT_HINT}


def test_the_named_constant_twin_passes_and_counts_layouts_and_queries(tmp_path: Path):
    result = lt_run(lt_tree(tmp_path, LT_GOOD))
    assert result.status.value == "pass", lt_found(result)
    assert result.examined == 8  # four C/D layouts (lc, &lc.v, batched lc, &p.lc) and four heuristic queries


def test_the_engine_rule_set_alone_does_not_judge_algo_counts(tmp_path: Path):
    """The reason the rule set exists: the launch rules take 1 as structural, so they pass the bare literals."""
    cfg = Config(gemv=GemvConfig(python=[], cuda=["src/**/*.cu"]))
    result = gv.run(Context(root=stage(lt_tree(tmp_path, LT_BAD)).path, config=cfg), argparse.Namespace(min_sites=None))
    assert [f for f in result.findings if f.rule == "GV006"] == []


def test_a_hard_coded_output_layout_dtype_fails(tmp_path: Path):
    root = lt_tree(tmp_path, LT_GOOD)
    line = lt_mutate(root, "MakeRowMajor(lc, out_type, m, n);", "MakeRowMajor(lc, CUDA_R_32F, m, n);")
    assert lt_found(lt_run(root)) == [
        (
            "GV005",
            LT_REL,
            line,
            (
                "MakeRowMajor creates the C/D layout lc with the literal "
                "CUDA_R_32F, not the caller's out dtype (out_type)"
            ),
        )
    ]


def test_a_raw_output_layout_from_the_operand_dtype_fails(tmp_path: Path):
    root = lt_tree(tmp_path, LT_GOOD)
    line = lt_mutate(root, "cublasLtMatrixLayoutCreate(&p.lc, out_type,", "cublasLtMatrixLayoutCreate(&p.lc, a_type,")
    assert lt_found(lt_run(root)) == [
        (
            "GV005",
            LT_REL,
            line,
            (
                "cublasLtMatrixLayoutCreate creates the C/D layout &p.lc "
                "with the expression a_type, not the caller's out dtype (out_type)"
            ),
        )
    ]


def test_a_runtime_algo_count_fails(tmp_path: Path):
    root = lt_tree(tmp_path, LT_GOOD)
    line = lt_mutate(
        root, "/*requestedAlgoCount=*/kGemvHeuristicAlgos, &p.heur", "/*requestedAlgoCount=*/n_algos, &p.heur"
    )
    assert lt_found(lt_run(root)) == [
        (
            "GV006",
            LT_REL,
            line,
            (f"{LT_WHERE} is n_algos, a runtime value: no constexpr or #define of n_algos in {LT_REL} or its includes"),
        )
    ]


def test_an_unmarked_algo_count_fails(tmp_path: Path):
    root = lt_tree(tmp_path, LT_GOOD)
    line = lt_mutate(root, "/*requestedAlgoCount=*/kGemvHeuristicAlgos, &p.heur", "kGemvHeuristicAlgos, &p.heur")
    assert lt_found(lt_run(root)) == [
        ("GV006", LT_REL, line, (f"{LT_WHERE} argument (kGemvHeuristicAlgos) lacks the /*requestedAlgoCount=*/ marker"))
    ]


def test_a_name_off_the_policy_list_fails(tmp_path: Path):
    root = lt_tree(tmp_path, LT_GOOD)
    line = lt_mutate(
        root,
        "constexpr int kGemvHeuristicAlgos = 1;",
        "constexpr int kGemvHeuristicAlgos = 1;\nconstexpr int kSearch = 8;",
    )
    second = lt_mutate(
        root, "/*requestedAlgoCount=*/kGemvHeuristicAlgos, &p.heur", "/*requestedAlgoCount=*/kSearch, &p.heur"
    )
    assert line == 2
    assert lt_found(lt_run(root, algo_constants=["kGemvHeuristicAlgos"])) == [
        (
            "GV006",
            LT_REL,
            second,
            f"{LT_WHERE} is kSearch, which is not one of the policy constants (kGemvHeuristicAlgos)",
        )
    ]
    assert lt_found(lt_run(root)) == []  # with no list, any declared constant is a policy


def test_a_constant_declared_twice_fails(tmp_path: Path):
    root = lt_tree(tmp_path, LT_GOOD)
    lt_mutate(
        root,
        "constexpr int kGemvHeuristicAlgos = 1;",
        "constexpr int kGemvHeuristicAlgos = 1;\nconstexpr int kGemvHeuristicAlgos = 2;",
    )
    result = lt_run(root)
    assert {f.rule for f in result.findings} == {"GV003"} and len(result.findings) == 4
    assert result.findings[0].message == (
        f"tuning constant kGemvHeuristicAlgos used by cublasLtMatmulAlgoGetHeuristic is declared 2 times ({LT_REL}:2, "
        f"{LT_REL}:3): declare it once"
    )


@pytest.mark.parametrize("text,examined", [("", 0), ("int f() { return g(1, 2); }\n", 0)])
def test_a_unit_without_cublaslt_sites_examines_nothing(tmp_path: Path, text: str, examined: int):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "x.cu").write_text(text)
    result = lt_run(tmp_path)
    assert result.examined == examined and result.status.value == "fail"
    assert [f.rule for f in result.findings] == ["GV004"]


def test_a_gemv_launch_with_a_templated_output_is_counted_and_passes():
    """The good twin of GV001's template form: the launch is a site the check examined, with no finding."""
    findings, sites = gv.check_sources(*fixture("float-output-template-good.cu"), min_sites=1)
    assert (findings, sites) == ([], 1)


def test_a_call_nested_in_another_is_judged_once_on_its_own_arguments():
    """The inner call's literal is the inner call's finding; the outer call reads it as `name(...)`, so
    nested calls cost linear work and no literal is reported twice."""
    from checkers.checks.gemv_invocation import cuda_sites as cu

    code = "void f() {\n  cublasSetX(h, cublasGetY(h, 7), 2);\n}\n"
    calls = cu.library_calls(code, gv.LIBRARY_CALL)
    assert [(c.name, c.args) for c in calls] == [
        ("cublasSetX", ("h", "cublasGetY(...)", "2")),
        ("cublasGetY", ("h", "7")),
    ]
    findings, sites = gv.check_sources([], [gv.Source("a.cu", code)], min_sites=1)
    assert sites == 2
    assert [(f.rule, f.message) for f in findings] == [
        (
            "GV002",
            "call of cublasSetX has the bare literal 2 in its argument 3 (2): a tuning parameter must be a named constant",
        ),
        (
            "GV002",
            "call of cublasGetY has the bare literal 7 in its argument 2 (7): a tuning parameter must be a named constant",
        ),
    ]
    spans = cu.call_spans(code, frozenset({"cublasSetX", "cublasGetY"}))
    assert [(c.name, [(a.text, code[a.start : a.end]) for a in c.args]) for c in spans] == [
        ("cublasSetX", [("h", "h"), ("cublasGetY(...)", "cublasGetY(h, 7)"), ("2", "2")]),
        ("cublasGetY", [("h", "h"), ("7", "7")]),
    ]


def test_a_launch_looks_back_for_its_kernel_no_further_than_the_previous_launch():
    from checkers.checks.gemv_invocation import cuda_sites as cu

    code = "a<float><<<1, 2>>>(x); b<<<3, 4>>>(y);"
    assert [(s.kernel, s.template_args, s.config) for s in cu.launches(code)] == [
        ("a", ("float",), ("1", "2")),
        ("b", (), ("3", "4")),
    ]


def test_a_source_linked_out_of_the_repository_is_an_error_and_not_read(tmp_path: Path):
    """A tracked symlink to a file outside (or to /dev/zero) was read wherever it pointed; now the check
    cannot verify and says which source and where it leads."""
    from checkers.results import CheckError

    outside = tmp_path / "outside.py"
    outside.write_text("import torch\n")
    root = tmp_path / "repo"
    (root / "engine").mkdir(parents=True)
    (root / "engine" / "ops.py").symlink_to(outside)
    with pytest.raises(CheckError) as err:
        run_on(root)
    assert str(err.value) == (f"engine/ops.py is a symlink that leads out of the repository (to {outside}); not read")


def test_a_call_whose_parenthesis_never_closes_is_no_site_and_the_next_call_still_is():
    """Each `(` is paired with its `)` in one scan (cuda_sites._close_parens); an unclosed one pairs with
    nothing, so its call is not read (no arguments to judge) while the calls after it are."""
    from checkers.checks.gemv_invocation import cuda_sites as cu

    code = "void f() {\n  cublasSetX(h, (2);\n  cublasGetY(h, 7);\n}\n"
    assert [(c.name, c.args) for c in cu.library_calls(code, gv.LIBRARY_CALL)] == [("cublasGetY", ("h", "7"))]


def _tamper_cache(root: Path) -> int:
    """Empty every cached list of findings, the seals left as they were; how many entries had some."""
    git_dir = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--absolute-git-dir"], capture_output=True, text=True, check=True
    ).stdout.strip()
    cache = Path(git_dir) / CACHE_DIR / "gemv-invocation.json"
    data = json.loads(cache.read_text())
    emptied = 0
    for _seal, value in data["entries"].values():
        emptied += bool(value[1])
        value[1] = []
    cache.write_text(json.dumps(data))
    return emptied


def test_a_changed_file_fails_after_a_green_cached_run_and_a_tampered_entry_is_ignored(engine_copy: Path):
    """The Python sites are remembered by each file's text: a seeded violation after two green runs (the
    second from the cache) still fails, and a cached answer altered by hand is derived again."""
    assert run_on(engine_copy).status.value == "pass"
    cached = run_on(engine_copy)
    assert cached.status.value == "pass"
    rel, old, new = "engine/ops/gemv.py", "F.linear(x, weight, bias)", "F.linear(x.float(), weight, bias)"
    line = mutate(engine_copy, rel, old, new)
    failed = run_on(engine_copy)
    expected = [("GV001", rel, line)]
    assert [(f.rule, f.path, f.line) for f in failed.findings] == expected
    assert _tamper_cache(engine_copy) == 1
    again = run_on(engine_copy)
    assert [(f.rule, f.path, f.line) for f in again.findings] == expected
    assert again.examined == failed.examined == cached.examined
