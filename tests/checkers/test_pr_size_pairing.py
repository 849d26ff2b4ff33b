"""pr-size pairing templates with name transforms: a kebab-case checker pairs with its snake_case test, in either
of the test's namings, and a checker changed without either fails naming both."""
from __future__ import annotations

import pytest

from checkers.checks.pr_size import pair_findings
from checkers.config import PairRule
from checkers.pathclass import Pairing
from checkers.results import CheckError

RULE = PairRule(name="script-test", when="scripts/check-{name}.py",
                require=["tests/scripts/test_check_{name|snake}.py", "tests/scripts/test_{name|snake}.py"])


def test_kebab_case_checker_requires_its_snake_case_test_in_either_naming():
    pairing = Pairing.compile(RULE)
    assert pairing.required("scripts/check-model-checklist.py") == [
        "tests/scripts/test_check_model_checklist.py", "tests/scripts/test_model_checklist.py"]
    assert pairing.required("scripts/agent-preflight.sh") is None


@pytest.mark.parametrize("test", ["tests/scripts/test_check_model_checklist.py",
                                  "tests/scripts/test_model_checklist.py"])
def test_either_naming_of_the_test_satisfies_the_pair(test: str):
    assert pair_findings(["scripts/check-model-checklist.py", test], [Pairing.compile(RULE)]) == []


def test_a_checker_changed_without_its_test_names_both_namings():
    [f] = pair_findings(["scripts/check-agent-record.py", "tests/scripts/test_check_model_checklist.py"],
                        [Pairing.compile(RULE)])
    assert (f.rule, f.path, f.message, f.hint) == (
        "PS003", "scripts/check-agent-record.py",
        ("scripts/check-agent-record.py changed but neither tests/scripts/test_check_agent_record.py nor "
        "tests/scripts/test_agent_record.py did (pairing rule script-test)"),
        ("change tests/scripts/test_check_agent_record.py or tests/scripts/test_agent_record.py in the same range "
        "(pr_size.pairs in .agents/config.yaml)"))


def test_transforms_chain_and_a_single_template_still_works():
    rule = PairRule(name="t", when="src/{area}/{name}.cpp", require="tests/{area|lower}/test-{name|kebab}.cpp")
    assert Pairing.compile(rule).required("src/VT/gemm_plan.cpp") == ["tests/vt/test-gemm-plan.cpp"]


def test_an_unknown_transform_is_an_error():
    with pytest.raises(CheckError, match="unknown transform 'camel'"):
        Pairing.compile(PairRule(name="t", when="a/{name}.py", require="b/{name|camel}.py"))
