"""pr-size: each rule fails on a seeded violation in a real repository; clean twins pass with their counts."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from checkers import registry
from checkers.checks.pr_size import pair_findings
from checkers.checks.pr_size.pathclass import Pairing
from checkers.config import PairRule, load_config
from checkers.context import Context
from checkers.gitio import parse_numstat_z
from checkers.output import render_text
from checkers.preflight import check_parser, run_check
from checkers.results import CheckError, Result
from tests.conftest import ROOT, GitRepo, init_repo

SPEC = registry.get("pr-size")
CONFIG = """\
version: 1
pr_size:
  deletion_weight: 0.5
  classes:
    - {name: checkers, paths: ["checkers/**"], budget: 40}
    - {name: checker-tests, paths: ["tests/checkers/**"], budget: 100}
    - {name: records, paths: [".agents/**", ".gitattributes"], budget: null}
    - {name: engine-cuda, paths: ["engine/cuda/**"], budget: 30, deletion_weight: 1.0}
    - {name: engine-python, paths: ["engine/**/*.py"], budget: 50}
    - {name: scripts, paths: ["scripts/*.py", "scripts/*.sh"], budget: 50}
  pairs:
    - name: checker-test
      when: "checkers/checks/{name}.py"
      require: "tests/checkers/test_{name}.py"
      exclude: ["checkers/checks/__init__.py"]
"""


def lines(n: int, tag: str) -> str:
    return "".join(f"{tag} line {i} {i * 7919 % 113}\n" for i in range(n))


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    """main: config, a check with its test, engine sources and a script; HEAD on a fresh `feature` branch."""
    r = init_repo(tmp_path / "repo")
    r.commit(
        "Base",
        {
            ".agents/config.yaml": CONFIG,
            "checkers/checks/__init__.py": "",
            "checkers/checks/foo.py": lines(13, "foo"),
            "checkers/util.py": lines(29, "util"),
            "tests/checkers/test_foo.py": lines(17, "test"),
            "engine/cuda/big.cu": lines(41, "kernel"),
            "engine/model/x.py": lines(23, "model"),
            "scripts/run.sh": lines(3, "echo"),
        },
    )
    r.git("checkout", "-q", "-b", "feature")
    return r


def check(repo: GitRepo, *argv: str, env: dict[str, str] | None = None) -> Result:
    ctx = Context(root=repo.path, config=load_config(repo.path), env=env or {}, notes=io.StringIO())
    return run_check(SPEC, ctx, check_parser(SPEC).parse_args(list(argv)))


def whole(findings) -> list[tuple]:
    return [(f.rule, f.path, f.message) for f in findings]


def test_clean_range_passes_with_table_and_counts(repo: GitRepo):
    repo.commit(
        "Change a check with its test, trim the model",
        {
            "checkers/checks/foo.py": lines(13, "foo") + lines(10, "more"),
            "tests/checkers/test_foo.py": lines(17, "test") + lines(20, "case"),
            "engine/model/x.py": lines(19, "model"),
        },
    )
    result = check(repo, "--base", "main")
    assert (result.status.value, result.examined) == ("pass", 3)
    assert result.summary == "OK: every path class is within its review budget (3 files, 32 lines)"
    assert result.details == [
        "class                 files   lines  budget  verdict",
        "checkers                  1      10      40  ok",
        "checker-tests             1      20     100  ok",
        "engine-python             1       2      50  ok",
    ]


def test_ps001_every_unclassified_path_is_reported_with_its_closest_class(repo: GitRepo):
    repo.commit(
        "New folders", {"scripts/sub/tool.py": lines(5, "t"), "engine/kern/y.cpp": lines(4, "k"), "notes.txt": "n\n"}
    )
    result = check(repo, "--base", "main")
    assert result.status.value == "fail" and result.examined == 3
    assert whole(result.findings) == [
        ("PS001", "engine/kern/y.cpp", "engine/kern/y.cpp fits no path class (closest: engine-cuda)"),
        ("PS001", "notes.txt", "notes.txt fits no path class (closest: records)"),
        ("PS001", "scripts/sub/tool.py", "scripts/sub/tool.py fits no path class (closest: scripts)"),
    ]
    assert result.details[-1] == "(unclassified)            3       -       -  no class"


def test_ps002_budget_counts_deletions_at_the_class_weight(repo: GitRepo):
    util = lines(29, "util").splitlines(keepends=True)
    repo.commit(
        "Grow the kernel and rewrite the helper",
        {
            "engine/cuda/big.cu": lines(31, "kernel") + lines(25, "new"),  # +25 -10 at weight 1.0
            "checkers/util.py": "".join(util[:7]) + lines(30, "fresh"),  # +30 -22 at weight 0.5
        },
    )
    result = check(repo, "--base", "main")
    assert whole(result.findings) == [
        ("PS002", None, "checkers changes 41 lines (budget 40)"),
        ("PS002", None, "engine-cuda changes 35 lines (budget 30)"),
    ]
    assert result.findings[0].hint.startswith("split the change into smaller pull requests")
    assert result.details == [
        "class                 files   lines  budget  verdict",
        "checkers                  1      41      40  over by 1",
        "engine-cuda               1      35      30  over by 5",
    ]


def test_ps003_a_changed_check_needs_its_test_changed(repo: GitRepo):
    repo.commit(
        "Change a check alone",
        {"checkers/checks/foo.py": lines(15, "foo"), "checkers/checks/__init__.py": "# package\n"},
    )
    result = check(repo, "--base", "main")
    assert whole(result.findings) == [
        (
            "PS003",
            "checkers/checks/foo.py",
            "checkers/checks/foo.py changed but tests/checkers/test_foo.py did not (pairing rule checker-test)",
        )
    ]


def test_ps003_a_new_check_without_a_test(repo: GitRepo):
    repo.commit("Add a check", {"checkers/checks/bar_baz.py": lines(3, "bar")})
    [f] = check(repo, "--base", "main").findings
    assert f.message == (
        "checkers/checks/bar_baz.py changed but tests/checkers/test_bar_baz.py did not (pairing rule checker-test)"
    )


def test_ps003_a_helper_of_a_check_package_needs_the_check_test(repo: GitRepo):
    """This repository's own rule: a check is a package, and any file in it pairs with the check's test;
    `{name}/**/*` needs a file below the package, so a module beside the packages does not match."""
    repo.write({".agents/config.yaml": CONFIG.replace('"checkers/checks/{name}.py"', '"checkers/checks/{name}/**/*"')})
    repo.commit("Package layout")
    repo.git("checkout", "-q", "-B", "main")
    repo.git("checkout", "-q", "-b", "pkg")
    repo.commit(
        "Change a helper alone",
        {"checkers/checks/bar/helper.py": lines(3, "helper"), "checkers/checks/__init__.py": "# package\n"},
    )
    assert whole(check(repo, "--base", "main").findings) == [
        (
            "PS003",
            "checkers/checks/bar/helper.py",
            "checkers/checks/bar/helper.py changed but tests/checkers/test_bar.py did not (pairing rule checker-test)",
        )
    ]


def test_pure_rename_costs_nothing_and_a_rename_with_edits_costs_the_edits(repo: GitRepo):
    repo.git("mv", "engine/cuda/big.cu", "engine/cuda/paged.cu")
    repo.commit("Rename the kernel")
    result = check(repo, "--base", "main")
    assert result.summary == "OK: every path class is within its review budget (1 files, 0 lines)"
    repo.git("mv", "engine/cuda/paged.cu", "engine/cuda/attn.cu")
    repo.commit("Rename with edits", {"engine/cuda/attn.cu": lines(41, "kernel") + lines(4, "edit")})
    result = check(repo, "--base", "main")
    assert result.summary == "OK: every path class is within its review budget (1 files, 4 lines)"


def test_rename_policy_full_costs_delete_plus_add(repo: GitRepo):
    repo.commit(
        "Full renames",
        {
            ".agents/config.yaml": CONFIG.replace(
                "  deletion_weight: 0.5\n", "  deletion_weight: 0.5\n  renames: full\n"
            )
        },
    )
    repo.git("mv", "engine/cuda/big.cu", "engine/cuda/paged.cu")
    repo.commit("Rename the kernel")
    assert whole(check(repo, "--base", "main").findings) == [
        ("PS002", None, "engine-cuda changes 82 lines (budget 30)")
    ]


def test_binary_files_are_listed_apart_with_byte_sizes(repo: GitRepo):
    blob = bytes((i * 37 + 11) % 256 for i in range(1013))
    repo.commit("Add a table", {"engine/cuda/table.bin": blob})
    result = check(repo, "--base", "main")
    assert result.summary == "OK: every path class is within its review budget (1 files, 0 lines)"
    assert result.details[-1] == "binary engine/cuda/table.bin: - -> 1,013 bytes"


def test_generated_files_are_excluded_and_listed(repo: GitRepo):
    repo.git("checkout", "-q", "main")
    repo.commit("Mark generated code", {".gitattributes": "engine/gen/** linguist-generated\n"})
    repo.git("checkout", "-q", "-B", "feature")
    repo.commit(
        "Generated code",
        {
            "engine/gen/tables.py": lines(500, "gen"),
            "engine/gen/odd name.txt": "x\n",
            "scripts/run.sh": lines(4, "echo"),
        },
    )
    result = check(repo, "--base", "main")
    assert result.summary == "OK: every path class is within its review budget (1 files, 1 lines)"
    assert result.details[-2:] == [
        "generated (excluded) engine/gen/odd name.txt: +1 -0",
        "generated (excluded) engine/gen/tables.py: +500 -0",
    ]


def test_a_branch_cannot_mark_its_own_files_generated(repo: GitRepo):
    """linguist-generated is judged by the base's .gitattributes: a branch that marks its own files counts
    them, and the details say why."""
    repo.commit(
        "Generated code",
        {".gitattributes": "engine/** linguist-generated\n", "engine/cuda/big.cu": lines(300, "kernel")},
    )
    result = check(repo, "--base", "main")
    assert (result.status.value, [(f.rule, f.message) for f in result.findings]) == (
        "fail",
        [("PS002", "engine-cuda changes 259 lines (budget 30)")],
    ), result.findings
    assert result.details[-1] == (
        "counted engine/cuda/big.cu: marked linguist-generated only by this branch's .gitattributes "
        "(judged by the base's)"
    )


def test_all_files_classifies_the_whole_tree(repo: GitRepo):
    assert check(repo, "--all-files").summary == "OK: all 8 tracked files fit a path class (whole tree)"
    repo.commit("A new folder", {"tools/new/gen.py": "print(1)\n"})
    result = check(repo, "--all-files")
    assert (result.status.value, result.examined) == ("fail", 9)
    assert whole(result.findings) == [
        ("PS001", "tools/new/gen.py", "tools/new/gen.py fits no path class (closest: engine-python)")
    ]


def test_empty_range_classifies_the_whole_tree_and_says_so(repo: GitRepo):
    head = repo.head()
    result = check(repo, "--base", "main")
    assert result.summary == (
        f"OK: empty range (head {head[:12]} is the merge base with main), so the whole "
        "tree was classified: all 8 tracked files fit a path class"
    )
    repo.git("checkout", "-q", "main")
    repo.commit("Unknown file on main", {"LICENSE": "text\n"})
    result = check(repo, "--base", "main")
    assert result.status.value == "fail"
    assert result.summary.endswith("is the merge base with main), so the whole tree was classified)")
    assert whole(result.findings) == [("PS001", "LICENSE", "LICENSE fits no path class (closest: records)")]


def test_pre_push_refs_come_from_pre_commit(repo: GitRepo):
    base = repo.head()
    repo.commit("Grow the kernel", {"engine/cuda/big.cu": lines(41, "kernel") + lines(31, "more")})
    result = check(repo, env={"PRE_COMMIT_FROM_REF": base, "PRE_COMMIT_TO_REF": repo.head()})
    assert whole(result.findings) == [("PS002", None, "engine-cuda changes 31 lines (budget 30)")]


def test_base_that_does_not_resolve_is_an_error_with_the_fix(repo: GitRepo):
    result = check(repo, "--base", "origin/nope")
    assert (result.status.value, result.summary) == ("error", "base 'origin/nope' does not resolve to a commit")
    assert result.hint.startswith("fetch it")


def test_head_behind_the_base_is_an_error(repo: GitRepo):
    old = repo.head()
    repo.commit("Moves ahead", {"scripts/run.sh": "echo\n"})
    result = check(repo, "--base", "feature", "--head", old)
    assert (result.status.value, result.summary) == (
        "error",
        f"head {old[:12]} is behind base feature ({repo.head()[:12]}): the range has no changes of its own",
    )
    assert result.hint == "check out the branch to measure, or pass the --base it was built on"


def test_a_shallow_clone_is_judged_inside_its_history_and_refused_across_the_cut(repo: GitRepo, tmp_path: Path):
    one = repo.commit("one", {"scripts/a.py": "a\n"})
    repo.commit("two", {"scripts/b.py": "b\n"})
    repo.commit("three", {"scripts/c.py": "c\n"})
    repo.git("branch", "side", one)
    subprocess.run(
        ["git", "clone", "-q", "--depth", "2", "--no-single-branch", f"file://{repo.path}", str(tmp_path / "shallow")],
        check=True,
        env=repo.env,
        capture_output=True,
        timeout=60,
    )
    shallow = GitRepo(tmp_path / "shallow")
    result = check(shallow, "--base", "HEAD~1")  # CI's fetch-depth: 2 on a one-commit change
    assert (result.status.value, result.summary) == (
        "pass",
        "OK: every path class is within its review budget (1 files, 1 lines)",
    )
    result = check(shallow, "--base", "origin/side")  # the merge base lies behind the cut
    assert (result.status.value, result.summary) == (
        "error",
        f"no merge base between {one[:12]} and {repo.head()[:12]} in this shallow clone",
    )
    assert result.hint == "run git fetch --unshallow (CI: fetch-depth: 0)"


def test_no_classes_configured_is_one_default_class(git_repo: GitRepo):
    git_repo.commit("c", {".agents/config.yaml": "version: 1\n"})
    result = check(git_repo, "--all-files")
    assert result.status.value == "pass" and result.details[1].startswith("all ")


def test_an_explicitly_empty_class_list_is_an_error(git_repo: GitRepo):
    git_repo.commit("c", {".agents/config.yaml": "version: 1\npr_size: {classes: []}\n"})
    result = check(git_repo, "--all-files")
    assert (result.status.value, result.summary) == ("error", "no path classes are configured")


def test_text_output_prints_the_table_then_the_findings(repo: GitRepo):
    repo.commit("Grow the kernel", {"engine/cuda/big.cu": lines(41, "kernel") + lines(31, "more")})
    assert render_text([check(repo, "--base", "main")]).splitlines() == [
        "class                 files   lines  budget  verdict",
        "engine-cuda               1      31      30  over by 1",
        "PS002 class-over-budget: engine-cuda changes 31 lines (budget 30)",
        "    fix: split the change into smaller pull requests, or raise the budget of engine-cuda in "
        "pr_size.classes in .agents/config.yaml with a reason",
        "FAIL: pr-size: 1 finding in 1 changed files",
    ]


def test_numstat_z_parser_reads_renames_binaries_and_odd_names():
    raw = b"3\t1\tplain.py\x005\t0\t\x00old/a b.py\x00new/a b.py\x00-\t-\tblob.bin\x00"
    assert [(s.path, s.added, s.deleted, s.old_path, s.binary) for s in parse_numstat_z(raw)] == [
        ("plain.py", 3, 1, None, False),
        ("new/a b.py", 5, 0, "old/a b.py", False),
        ("blob.bin", None, None, None, True),
    ]


def test_this_repository_tree_fits_its_path_classes():
    result = check(GitRepo(ROOT), "--all-files")
    assert result.status.value == "pass", result.findings


def test_range_of_only_generated_files_classifies_the_whole_tree(repo: GitRepo):
    repo.commit("Mark generated", {".gitattributes": "engine/gen/** linguist-generated\n"})
    repo.git("checkout", "-q", "main")
    repo.git("merge", "-q", "--ff-only", "feature")
    repo.git("checkout", "-q", "feature")
    repo.commit("Regenerate", {"engine/gen/tables.py": lines(50, "gen")})
    result = check(repo, "--base", "main")
    assert result.summary == (
        "OK: every file the range changes is generated (1 files), so the whole tree was "
        "classified: all 9 tracked files fit a path class"
    )


def test_command_line_exit_codes_and_the_printed_base(repo: GitRepo):
    repo.commit("Grow the kernel", {"engine/cuda/big.cu": lines(41, "kernel") + lines(31, "more")})
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin:/usr/local/bin"}

    def run(*a: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "checkers", "check", "pr-size", *a],
            cwd=repo.path,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )

    failed, errored = run("--base", "main"), run("--base", "nope")
    assert failed.returncode == 1 and failed.stdout.splitlines()[-1] == "FAIL: pr-size: 1 finding in 1 changed files"
    assert failed.stderr.startswith("rowgate: base main (--base) = ")
    assert (errored.returncode, errored.stdout.splitlines()[0]) == (
        3,
        "ERROR: pr-size: base 'nope' does not resolve to a commit",
    )
    assert run("--all-files").returncode == 0


def test_pairing_rule_with_an_uncaptured_placeholder_is_an_error(repo: GitRepo):
    repo.commit(
        "Bad pair",
        {
            ".agents/config.yaml": CONFIG.replace(
                'require: "tests/checkers/test_{name}.py"', 'require: "tests/{area}/test_{name}.py"'
            )
        },
    )
    repo.commit("Change", {"scripts/run.sh": "echo\n"})
    result = check(repo, "--base", "main")
    assert (result.status.value, result.summary) == (
        "error",
        "pairing rule 'checker-test': require uses {area}, which when does not capture",
    )


def test_a_class_defined_twice_is_a_config_error_naming_the_line(repo: GitRepo):
    from checkers.yamlio import RecordError

    repo.write({".agents/config.yaml": CONFIG.replace("name: scripts", "name: checkers")})
    with pytest.raises(RecordError) as exc:
        load_config(repo.path)
    assert exc.value.lines() == [
        ".agents/config.yaml:4: pr_size.classes: Value error, class 'checkers' is defined twice"
    ]


# --- pairing templates with name transforms: a kebab-case checker pairs with its snake_case test, in either of
# the test's namings, and a checker changed without either fails naming both.

RULE = PairRule(
    name="script-test",
    when="scripts/check-{name}.py",
    require=["tests/scripts/test_check_{name|snake}.py", "tests/scripts/test_{name|snake}.py"],
)


def test_kebab_case_checker_requires_its_snake_case_test_in_either_naming():
    pairing = Pairing.compile(RULE)
    assert pairing.required("scripts/check-model-checklist.py") == [
        "tests/scripts/test_check_model_checklist.py",
        "tests/scripts/test_model_checklist.py",
    ]
    assert pairing.required("scripts/agent-preflight.sh") is None


@pytest.mark.parametrize(
    "test", ["tests/scripts/test_check_model_checklist.py", "tests/scripts/test_model_checklist.py"]
)
def test_either_naming_of_the_test_satisfies_the_pair(test: str):
    assert pair_findings(["scripts/check-model-checklist.py", test], [Pairing.compile(RULE)]) == []


def test_a_checker_changed_without_its_test_names_both_namings():
    [f] = pair_findings(
        ["scripts/check-agent-record.py", "tests/scripts/test_check_model_checklist.py"], [Pairing.compile(RULE)]
    )
    assert (f.rule, f.path, f.message, f.hint) == (
        "PS003",
        "scripts/check-agent-record.py",
        (
            "scripts/check-agent-record.py changed but neither tests/scripts/test_check_agent_record.py nor "
            "tests/scripts/test_agent_record.py did (pairing rule script-test)"
        ),
        (
            "change tests/scripts/test_check_agent_record.py or tests/scripts/test_agent_record.py in the same range "
            "(pr_size.pairs in .agents/config.yaml)"
        ),
    )


def test_transforms_chain_and_a_single_template_still_works():
    rule = PairRule(name="t", when="src/{area}/{name}.cpp", require="tests/{area|lower}/test-{name|kebab}.cpp")
    assert Pairing.compile(rule).required("src/VT/gemm_plan.cpp") == ["tests/vt/test-gemm-plan.cpp"]


def test_an_unknown_transform_is_an_error():
    with pytest.raises(CheckError, match="unknown transform 'camel'"):
        Pairing.compile(PairRule(name="t", when="a/{name}.py", require="b/{name|camel}.py"))


def test_a_pairing_rule_with_several_uncaptured_placeholders_names_the_first_it_meets(repo: GitRepo):
    repo.commit(
        "Bad pair",
        {
            ".agents/config.yaml": CONFIG.replace(
                'require: "tests/checkers/test_{name}.py"', 'require: "tests/{zone}/{area}/test_{name}.py"'
            )
        },
    )
    repo.commit("Change", {"scripts/run.sh": "echo\n"})
    result = check(repo, "--base", "main")
    assert (result.status.value, result.summary) == (
        "error",
        "pairing rule 'checker-test': require uses {zone}, which when does not capture",
    )


def test_a_pairing_rule_captures_in_one_pass_on_a_long_path():
    """`when` placeholders are captured by the linear matcher (checkers.globmatch), shortest first as the
    regex `[^/]+?` did; a long path that does not match ends at once instead of backtracking."""
    rule = PairRule(name="deep", when="**/{a}{b}*x*x*x*x.py", require="tests/{a}/{b}.py")
    pairing = Pairing.compile(rule)
    assert pairing.required("src/mxxxxx.py") == ["tests/m/x.py"]
    assert pairing.required("src/" + "x" * 5000 + ".pyc") is None
