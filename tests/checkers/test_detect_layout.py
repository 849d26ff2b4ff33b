"""The layout detectors `rowgate init` calls, on a fixture tree shaped like a foreign engine's (env tables headed
`| Variable |` in two documents, a one-name-per-line allowlist, getenv wrappers in C++, CUDA and Python, a cuBLASLt
matmul file, kebab-case checker scripts with snake_case tests), and the checks run on the config they write."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from checkers import detect_layout as dl
from checkers import registry
from checkers.config import load_config
from checkers.context import Context
from checkers.preflight import check_parser, run_check
from checkers.results import Result
from tests.conftest import ROOT, GitRepo, init_repo

FIXTURES = ROOT / "tests" / "fixtures"
MATMUL = "src/vt/cuda/cuda_matmul.cu"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The foreign tree, with the gemv check's cuBLASLt fixture as its matmul file (kept once, in gemv/)."""
    root = tmp_path_factory.mktemp("vllmcpp") / "tree"
    shutil.copytree(FIXTURES / "foreign" / "vllmcpp", root)
    shutil.copyfile(FIXTURES / "gemv" / "cublaslt-literal-algo-count.cu", root / MATMUL)
    return root


def test_env_doc_finds_tables_allowlist_prefixes_and_wrappers(tree: Path):
    found = dl.env_doc(tree)
    assert found is not None
    assert found.config == {
        "prefixes": ["VT_", "VLLM_"],
        "doc": "docs/ENVIRONMENT.md",
        "docs": ["docs/guides/serving.md"],
        "table_headers": ["Variable"],
        "allowlist": "scripts/env-doc-allowlist.txt",
        "allowlist_format": "names",
        "allowlist_sorted": False,
        "readers": ["EnvOnOr", "GdnTritonEnvOn", "env_flag"],
        "flags_file": None,
        "exclude": ["tests/**"],
    }
    assert found.reasons == [
        "env var prefixes VT_, VLLM_ (from the documented and allowlisted names)",
        "docs/ENVIRONMENT.md: 3 name(s) in 2 table(s) headed `| Variable |`",
        "docs/guides/serving.md: 1 name(s) in 1 table(s) headed `| Variable |`",
        (
            "scripts/env-doc-allowlist.txt: 3 name(s), one name per line; not sorted (VT_GDN_DELTAH_TRITON after "
            "VT_GDN_TRITON_CHUNK_POOL): allowlist_sorted: false until it is"
        ),
        "EnvOnOr: a getenv wrapper defined in src/vllm/util/env.cpp, called with a name 3 time(s)",
        "GdnTritonEnvOn: a getenv wrapper defined in src/vt/cuda/cuda_gdn.cu, called with a name 2 time(s)",
        "env_flag: a getenv wrapper defined in scripts/bench_env.py, called with a name 1 time(s)",
        "tests/** not scanned: a test's reads are not production env vars (drop the exclude to hold them too)",
    ]


def test_a_wrapper_nobody_calls_with_a_name_and_vendored_wrappers_are_left_out(tree: Path):
    readers = dl.env_readers(tree, ("VT_", "VLLM_"))
    assert "EnvOn" not in readers  # defined, but only EnvOnOr calls it, with a variable
    assert "VendorEnv" not in readers  # third_party/ is not the repository's own code


def test_gemv_selects_the_cublaslt_rule_set_where_heuristic_calls_are(tree: Path):
    found = dl.gemv_invocation(tree)
    assert found is not None
    assert found.config == {"rule_sets": ["cublaslt"], "python": [], "cuda": [MATMUL], "min_sites": 4}
    assert found.reasons[0] == f"{MATMUL}: 4 cublasLtMatmulAlgoGetHeuristic call(s)"


def test_pr_size_pairs_kebab_checkers_with_snake_tests_in_both_namings(tree: Path):
    found = dl.pr_size_pairs(tree)
    assert found is not None
    assert found.config == {
        "pairs": [
            {
                "name": "scripts-checker-test",
                "when": "scripts/check-{name}.py",
                "require": ["tests/scripts/test_check_{name|snake}.py", "tests/scripts/test_{name|snake}.py"],
            }
        ]
    }
    assert found.reasons == [
        (
            "scripts/check-{name}.py pairs with tests/scripts/test_check_{name|snake}.py or "
            "tests/scripts/test_{name|snake}.py: 2 of 3 checkers have their test today"
        )
    ]


@pytest.mark.parametrize("detector", [dl.env_doc, dl.gemv_invocation, dl.pr_size_pairs])
def test_a_tree_without_the_layout_detects_nothing(tmp_path: Path, detector):
    (tmp_path / "README.md").write_text("# A project\n\n| Option | Meaning |\n|---|---|\n| `x` | y |\n")
    (tmp_path / "main.c").write_text('#include <stdlib.h>\nint main() { return getenv("HOME") != 0; }\n')
    assert detector(tmp_path) is None


# --- the checks on the config the detectors write -------------------------------------------------------


@pytest.fixture
def foreign(tmp_path: Path, tree: Path) -> GitRepo:
    shutil.copytree(tree, tmp_path / "repo")
    repo = init_repo(tmp_path / "repo")
    sections = {"env_doc": dl.env_doc(tree), "gemv": dl.gemv_invocation(tree), "pr_size": dl.pr_size_pairs(tree)}
    config = {"version": 1, **{k: v.config for k, v in sections.items() if v is not None}}
    out = io.StringIO()
    YAML().dump(config, out)
    repo.commit("Import", {".agents/config.yaml": out.getvalue()})
    return repo


def check(repo: GitRepo, check_id: str, *argv: str) -> Result:
    spec = registry.get(check_id)
    ctx = Context(root=repo.path, config=load_config(repo.path), env={}, notes=io.StringIO())
    return run_check(spec, ctx, check_parser(spec).parse_args(list(argv)))


def test_env_doc_reads_the_tables_and_allowlist_and_the_reads_through_wrappers(foreign: GitRepo):
    result = check(foreign, "env-doc")
    assert result.status.value == "pass", [f.message for f in result.findings]
    assert result.summary == (
        "OK: all 7 production env vars documented or classified (4 documented in "
        "docs/ENVIRONMENT.md, docs/guides/serving.md, 3 allowlisted)"
    )


def test_env_doc_fails_an_undocumented_read_through_a_wrapper(foreign: GitRepo):
    foreign.commit(
        "A new knob",
        {
            "src/vllm/entrypoints/knob.cpp": "bool EnvOnOr(const char* name, bool fallback);\n"
            'bool Knob() { return EnvOnOr("VT_NEW_KNOB", true); }\n'
        },
    )
    result = check(foreign, "env-doc")
    assert [(f.rule, f.location(), f.message) for f in result.findings] == [
        (
            "ED001",
            "src/vllm/entrypoints/knob.cpp:2",
            (
                "VT_NEW_KNOB read at src/vllm/entrypoints/knob.cpp:2 is not "
                "documented in docs/ENVIRONMENT.md or docs/guides/serving.md nor classified in scripts/env-doc-allowlist.txt"
            ),
        )
    ]


def test_env_doc_fails_a_documented_row_whose_reader_is_gone(foreign: GitRepo, tree: Path):
    foreign.commit(
        "Drop a reader",
        {
            "src/vllm/entrypoints/server.cpp": (tree / "src/vllm/entrypoints/server.cpp")
            .read_text()
            .replace('EnvOnOr("VT_GGUF_KEEP_QUANT", false)', "false")
        },
    )
    result = check(foreign, "env-doc")
    assert [(f.rule, f.location(), f.message) for f in result.findings] == [
        ("ED002", "docs/ENVIRONMENT.md:17", "VT_GGUF_KEEP_QUANT is documented but nothing reads it")
    ]


def test_gemv_fails_the_four_bare_algo_counts_and_passes_the_named_constant(foreign: GitRepo):
    result = check(foreign, "gemv-invocation")
    assert [(f.rule, f.location()) for f in result.findings] == [("GV006", f"{MATMUL}:{n}") for n in (26, 38, 50, 62)]
    text = (foreign.path / MATMUL).read_text()
    foreign.commit(
        "Name the algo count",
        {
            MATMUL: "constexpr int kGemvHeuristicAlgos = 1;\n"
            + text.replace("/*requestedAlgoCount=*/1", "/*requestedAlgoCount=*/kGemvHeuristicAlgos")
        },
    )
    result = check(foreign, "gemv-invocation")
    assert (result.status.value, result.examined) == ("pass", 8)


def test_the_module_prints_every_section_with_its_reasons(capsys: pytest.CaptureFixture[str], tree: Path):
    assert dl.main([str(tree)]) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if not line.startswith(("#", " "))] == ["env_doc:", "gemv:", "pr_size:"]
    assert "# src/vt/cuda/cuda_matmul.cu: 4 cublasLtMatmulAlgoGetHeuristic call(s)\n" in out
