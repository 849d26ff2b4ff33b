"""env-doc: each rule fails on a seeded violation in a real repository; the clean twin passes with its counts."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from checkers import registry
from checkers.checks.env_doc.envscan import c_reads, python_reads
from checkers.config import load_config
from checkers.contentcache import CACHE_DIR
from checkers.context import Context
from checkers.flagdecls import parse_flag_decls
from checkers.preflight import check_parser, run_check
from checkers.render import render_environment
from checkers.results import Result
from tests.conftest import ROOT, GitRepo, init_repo

SPEC = registry.get("env-doc")
FIXTURES = ROOT / "tests" / "fixtures" / "env_doc"
ALLOW = "scripts/env-doc-allowlist.txt"
CONFIG = """\
version: 1
env_doc:
  prefixes: [VT_]
  classes: [kernel-switch, debug, test-only]
  readers: [enabled, value]
  exclude: ["tests/fixtures/**"]
"""
FLAGS = """\
from engine.registry import declare
declare("VT_ATTN_FAST", False, "KERNEL-ATTN", "Fast attention arm.")
declare("VT_CACHE_DIR", "", "BACKEND-CUDA", "Build cache directory.")
"""
ALLOWLIST = """\
# NAME  CLASS  reason
VT_DEBUG_DUMP  debug  dumps each decode step's logits to stderr when set
VT_TEST_SEED  test-only  pins the random seed of the property tests
"""


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    r = init_repo(tmp_path / "repo")
    r.commit(
        "Base",
        {
            ".agents/config.yaml": CONFIG,
            "engine/flags.py": FLAGS,
            "docs/ENVIRONMENT.md": render_environment(parse_flag_decls(FLAGS)),
            ALLOW: ALLOWLIST,
            "engine/attn.py": 'from engine import flags\n\nFAST = flags.enabled("VT_ATTN_FAST")\n'
            'CACHE = flags.value("VT_CACHE_DIR")\n',
            "engine/dump.py": "import os\n\n\ndef dump():\n    return os.environ.get('VT_DEBUG_DUMP') == '1'\n",
            "engine/cuda/seed.cu": '#include <cstdlib>\n// getenv("VT_UNDOCUMENTED_IN_COMMENT")\n'
            'int seed() { return std::getenv("VT_TEST_SEED") != nullptr; }\n',
            "engine/paths.py": "import os\nBASE = os.environ.get('ROWGATE_BASE', 'main')\n",
            "tests/fixtures/env_doc/bad.py": "import os\nos.environ['VT_SEEDED_VIOLATION']\n",
            "README.md": "os.environ.get('VT_NOT_SOURCE')\n",
        },
    )
    return r


def check(repo: GitRepo, *argv: str) -> Result:
    ctx = Context(root=repo.path, config=load_config(repo.path), env={}, notes=io.StringIO())
    return run_check(SPEC, ctx, check_parser(SPEC).parse_args(list(argv)))


def whole(result: Result) -> list[tuple]:
    return [(f.rule, f.location(), f.message) for f in result.findings]


def test_clean_repository_passes_with_counts(repo: GitRepo):
    result = check(repo)
    assert (result.status.value, result.examined, result.unit) == ("pass", 5, "files")
    assert result.summary == (
        "OK: all 4 production env vars documented or classified (2 documented in "
        "docs/ENVIRONMENT.md, 2 allowlisted, 2 declared flags consulted)"
    )


def test_ed001_undocumented_reads_in_python_and_cuda_name_their_site(repo: GitRepo):
    repo.commit(
        "New reads",
        {
            "engine/runner.py": "from os import getenv as g\n\nEAGER = g('VT_EAGER_NEW')\n",
            "engine/cuda/attn.cu": 'const char* s = std::getenv(\n  "VT_ATTN_" "SPLIT");\n',
        },
    )
    assert whole(check(repo)) == [
        (
            "ED001",
            "engine/cuda/attn.cu:1",
            "VT_ATTN_SPLIT read at engine/cuda/attn.cu:1 is not documented in "
            "docs/ENVIRONMENT.md nor classified in scripts/env-doc-allowlist.txt",
        ),
        (
            "ED001",
            "engine/runner.py:3",
            "VT_EAGER_NEW read at engine/runner.py:3 is not documented in "
            "docs/ENVIRONMENT.md nor classified in scripts/env-doc-allowlist.txt",
        ),
    ]


def test_untracked_files_are_not_scanned(repo: GitRepo):
    repo.write({"engine/scratch.py": "import os\nos.getenv('VT_SCRATCH')\n"})
    assert check(repo).status.value == "pass"


def test_ed006_a_declared_flag_that_nothing_consults_fails(repo: GitRepo):
    """A declaration is not a read: the flag is documented (rendered from the registry) and declared, and
    still fails once its one consumer is gone, once, as ED006."""
    repo.commit(
        "Drop a consumer", {"engine/attn.py": 'from engine import flags\n\nFAST = flags.enabled("VT_ATTN_FAST")\n'}
    )
    result = check(repo)
    assert whole(result) == [
        ("ED006", "engine/flags.py:3", "VT_CACHE_DIR is declared at engine/flags.py:3 but nothing consults it")
    ]
    assert result.findings[0].hint == "read it where it gates (a reader: enabled, value), or delete the declaration"


def test_ed002_documented_name_that_nothing_reads_is_stale(repo: GitRepo):
    repo.commit(
        "A second document",
        {
            ".agents/config.yaml": CONFIG.replace(
                "  readers:", "  docs: [docs/TUNING.md]\n  table_headers: [flag, Variable]\n  readers:"
            ),
            "docs/TUNING.md": "# Tuning\n\n| Variable | Default | What it does |\n|---|---|---|\n"
            "| `VT_TUNE_GONE` | off | nothing reads it |\n",
        },
    )
    result = check(repo)
    assert whole(result) == [("ED002", "docs/TUNING.md:5", "VT_TUNE_GONE is documented but nothing reads it")]
    assert result.findings[0].hint == "delete its row in docs/TUNING.md, or restore the read"


def test_ed002_allowlisted_name_that_nothing_reads_names_its_own_line(repo: GitRepo):
    repo.commit("Drop the dump", {"engine/dump.py": "def dump():\n    return False\n"})
    result = check(repo)
    assert whole(result) == [("ED002", f"{ALLOW}:2", "VT_DEBUG_DUMP is allowlisted but nothing reads it")]
    assert result.findings[0].hint == f"delete line 2 of {ALLOW}"


@pytest.mark.parametrize(
    "line, message",
    [
        (
            "VT_DEBUG_DUMP  debug",
            "VT_DEBUG_DUMP has no reason: write `VT_DEBUG_DUMP  CLASS  reason` with CLASS one "
            "of kernel-switch, debug, test-only",
        ),
        (
            "VT_DEBUG_DUMP  verbose  prints more",
            "VT_DEBUG_DUMP: class 'verbose' is not one of kernel-switch, debug, test-only",
        ),
    ],
)
def test_ed003_allowlist_line_without_a_reason_or_known_class(repo: GitRepo, line: str, message: str):
    repo.commit("Edit the allowlist", {ALLOW: ALLOWLIST.replace(ALLOWLIST.splitlines()[1], line)})
    assert whole(check(repo)) == [("ED003", f"{ALLOW}:2", message)]


def test_ed003_repeated_name(repo: GitRepo):
    repo.commit("Repeat", {ALLOW: ALLOWLIST + "VT_TEST_SEED  debug  again\n"})
    assert whole(check(repo)) == [("ED003", f"{ALLOW}:4", "VT_TEST_SEED is listed twice")]


def test_ed004_allowlist_unsorted(repo: GitRepo):
    head, first, second = ALLOWLIST.splitlines()
    repo.commit("Unsort", {ALLOW: "\n".join([head, second, first]) + "\n"})
    assert whole(check(repo)) == [
        ("ED004", f"{ALLOW}:3", "VT_DEBUG_DUMP comes after VT_TEST_SEED: entries are sorted by name")
    ]


def test_ed005_allowlisted_and_documented_is_redundant(repo: GitRepo):
    repo.commit("Redundant", {ALLOW: "VT_ATTN_FAST  kernel-switch  the fast arm\n" + ALLOWLIST})
    assert whole(check(repo)) == [
        ("ED005", f"{ALLOW}:1", "VT_ATTN_FAST is allowlisted but also documented in docs/ENVIRONMENT.md")
    ]


def test_fix_adds_sorted_stubs_removes_nothing_and_still_fails(repo: GitRepo):
    repo.commit(
        "New reads",
        {"engine/a.py": "import os\nA = os.environ['VT_ZETA']\nB = os.getenv('VT_ALPHA')\nC = os.getenv('VT_ALPHA')\n"},
    )
    result = check(repo, "--fix")
    assert (repo.path / ALLOW).read_text() == (
        "# NAME  CLASS  reason\n"
        "VT_ALPHA  # stub from --fix: read at engine/a.py:3; write its class and a reason\n"
        "VT_DEBUG_DUMP  debug  dumps each decode step's logits to stderr when set\n"
        "VT_TEST_SEED  test-only  pins the random seed of the property tests\n"
        "VT_ZETA  # stub from --fix: read at engine/a.py:2; write its class and a reason\n"
    )
    no_class = (
        "has no class and no reason: write `{0}  CLASS  reason` with CLASS one of kernel-switch, debug, test-only"
    )
    assert whole(result) == [
        ("ED003", f"{ALLOW}:2", "VT_ALPHA " + no_class.format("VT_ALPHA")),
        ("ED003", f"{ALLOW}:5", "VT_ZETA " + no_class.format("VT_ZETA")),
    ]
    assert check(repo, "--fix").findings == result.findings  # idempotent: no second stub
    text = (repo.path / ALLOW).read_text().replace("VT_ZETA  #", "VT_ZETA  kernel-switch  picks the zeta arm #")
    repo.write({ALLOW: text.replace("VT_ALPHA  #", "VT_ALPHA  debug  traces alpha #")})
    assert check(repo).summary.startswith("OK: all 6 production env vars documented or classified (")


def test_fix_creates_a_missing_allowlist(repo: GitRepo):
    repo.git("rm", "-q", ALLOW)
    repo.commit("No allowlist")
    result = check(repo, "--fix")
    text = (repo.path / ALLOW).read_text()
    assert text.startswith("# Env vars the code reads that docs/ENVIRONMENT.md does not document")
    assert [f.rule for f in result.findings] == ["ED003", "ED003"]


def test_missing_doc_is_an_error_with_the_fix(repo: GitRepo):
    repo.git("rm", "-q", "docs/ENVIRONMENT.md")
    repo.commit("No doc")
    result = check(repo)
    assert (result.status.value, result.summary, result.hint) == (
        "error",
        "docs/ENVIRONMENT.md not found",
        "render it from engine/flags.py with `rowgate render`",
    )


def test_python_read_forms_fixture():
    source = (FIXTURES / "python-read-forms.py").read_text()
    assert [(r.name, r.line) for r in python_reads(source, "f.py", ("VT_",))] == [
        ("VT_GET", 12),
        ("VT_GETENV", 13),
        ("VT_SUBSCRIPT", 14),
        ("VT_IN", 15),
        ("VT_NOT_IN", 16),
        ("VT_ENVIRON_ALIAS", 17),
        ("VT_GETENV_ALIAS", 18),
        ("VT_OS_ALIAS", 19),
        ("VT_FROM_CONSTANT", 20),
        ("VT_ASSIGNED_ALIAS", 21),
        ("VT_BARE_GETENV", 22),
        ("VT_SETDEFAULT", 23),
    ]


def test_c_comments_strings_splices_and_concatenation_fixture():
    source = (FIXTURES / "c-comments-and-continuations.cu").read_text()
    assert [(r.name, r.line) for r in c_reads(source, "f.cu", ("VT_",))] == [
        ("VT_STD", 6),
        ("VT_PLAIN", 7),
        ("VT_CONCAT", 8),
        ("VT_SPLICED", 9),
        ("VT_NEXT_LINE", 11),
        ("VT_SECURE", 17),
        ("VT_AFTER_DIVISION", 19),
    ]


def test_this_repository_passes():
    ctx = Context(root=ROOT, config=load_config(ROOT), env={}, notes=io.StringIO())
    result = run_check(SPEC, ctx, check_parser(SPEC).parse_args([]))
    assert result.status.value == "pass", result.findings


def test_python_file_that_does_not_parse_is_scanned_as_text():
    source = "import os\nx = os.environ.get('VT_OK')\nprint 'py2'\ny = os.environ['VT_SUB'] + getenv(\"VT_G\")\n"
    assert [(r.name, r.line) for r in python_reads(source, "t.py", ("VT_",))] == [
        ("VT_OK", 2),
        ("VT_SUB", 4),
        ("VT_G", 4),
    ]


def test_command_line_exit_codes(repo: GitRepo):
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin:/usr/local/bin"}

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "checkers", "check", "env-doc"],
            cwd=repo.path,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )

    ok = run()
    assert (ok.returncode, ok.stdout) == (
        0,
        "OK: all 4 production env vars documented or classified (2 documented "
        "in docs/ENVIRONMENT.md, 2 allowlisted, 2 declared flags consulted)\n",
    )
    repo.commit("A new read", {"engine/r.py": "import os\nos.getenv('VT_R')\n"})
    failed = run()
    assert failed.returncode == 1 and failed.stdout.splitlines()[0] == (
        "engine/r.py:2: ED001 env-undocumented: VT_R read at engine/r.py:2 is not documented in docs/ENVIRONMENT.md "
        "nor classified in scripts/env-doc-allowlist.txt"
    )


def test_an_allowlist_symlinked_out_of_the_repository_is_an_error_and_is_not_touched(repo: GitRepo, tmp_path: Path):
    outside = tmp_path / "outside.txt"
    outside.write_text(ALLOWLIST)
    (repo.path / ALLOW).unlink()
    (repo.path / ALLOW).symlink_to(outside)
    result = check(repo, "--fix")
    assert (result.status.value, result.summary, result.hint) == (
        "error",
        f"config env_doc.allowlist: {ALLOW} leads out of the repository through a symlink (to {outside})",
        "set env_doc.allowlist to a path inside the repository, relative to its root",
    )
    assert outside.read_text() == ALLOWLIST  # --fix wrote nothing there


def test_the_c_tokenizer_meter_counts_each_token_once():
    from checkers.linear import Meter

    source = 'int a = EnvOr(EnvOr("VT_A" "_B", 1), 2); /* getenv("VT_C") */ getenv("VT_D");\n'
    meter = Meter()
    reads = c_reads(source, "f.cu", ("VT_",), ("EnvOr",), meter)
    assert [(r.name, r.line) for r in reads] == [("VT_A_B", 1), ("VT_D", 1)]
    assert meter.scanned <= 2 * len(source) and meter.steps <= len(source)


def test_ed001_hint_without_a_flag_registry_names_the_doc_table(repo: GitRepo):
    # flags_file unset (a repository with no flag registry): the hint must not say "declare it in None"
    repo.commit(
        "No registry",
        {
            ".agents/config.yaml": CONFIG + "  flags_file: null\n",
            "engine/runner.py": "import os\nos.getenv('VT_NEW')\n",
        },
    )
    hints = {f.hint for f in check(repo).findings if f.rule == "ED001"}
    assert hints == {
        "add a row for it to docs/ENVIRONMENT.md, or classify it in scripts/env-doc-allowlist.txt as "
        "`NAME  CLASS  reason` (--fix adds a stub)"
    }


def test_reads_after_a_raw_string_and_a_digit_separator_are_found():
    """A C++ raw string (`R"d(...)d"`, holding quotes and `/*`) and a number with digit separators
    (`1'000'000`) are tokens of their own: the tokenizer took the first for a string that ends at its inner
    quote (and a comment that ran to the end of the file), the second for a char literal to the end of the
    line, and missed the reads after them."""
    from checkers.checks.env_doc.envscan import c_reads

    src = (
        'auto s = R"x(/* not a comment " getenv("VT_NOT") )x"; const char* a = getenv("VT_AFTER_RAW");\n'
        "int n = 1'000'000; const char* b = getenv(\"VT_AFTER_SEP\");\n"
        'auto t = u8R"(a)"; auto f = 0x1\'0p+1\'0; getenv("VT_LAST");\n'
    )
    assert [(r.name, r.line) for r in c_reads(src, "a.cu", ("VT_",))] == [
        ("VT_AFTER_RAW", 1),
        ("VT_AFTER_SEP", 2),
        ("VT_LAST", 3),
    ]


def test_a_changed_file_fails_after_a_green_cached_run_and_a_tampered_entry_is_ignored(repo: GitRepo):
    """A Python file's reads are remembered by its bytes: a seeded read after two green runs (the second from
    the cache) still fails; a cached answer altered by hand (the read dropped, the seal kept) is derived again;
    and a cache file that is garbage is no cache."""
    assert check(repo).status.value == "pass"
    assert check(repo).status.value == "pass"
    repo.write({"engine/dump.py": "import os\n\n\ndef dump():\n    return os.environ.get('VT_SEEDED_NEW')\n"})
    stale = ("ED002", f"{ALLOW}:2", "VT_DEBUG_DUMP is allowlisted but nothing reads it")
    undocumented = (
        "ED001",
        "engine/dump.py:5",
        f"VT_SEEDED_NEW read at engine/dump.py:5 is not documented in docs/ENVIRONMENT.md nor classified in {ALLOW}",
    )
    assert sorted(whole(check(repo))) == sorted([undocumented, stale])
    cache = Path(repo.git("rev-parse", "--absolute-git-dir").strip()) / CACHE_DIR / "env-doc.json"
    data = json.loads(cache.read_text())
    for _seal, value in data["entries"].values():
        value.clear()
    cache.write_text(json.dumps(data))
    assert sorted(whole(check(repo))) == sorted([undocumented, stale])
    cache.write_text("{not json")
    assert sorted(whole(check(repo))) == sorted([undocumented, stale])
