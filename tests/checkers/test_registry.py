"""Meta-tests: the registry, the scripts, the hooks, the README and the tests agree."""

from __future__ import annotations

import re

import pytest
from ruamel.yaml import YAML

from checkers import registry
from tests.conftest import ROOT

HOOKS = YAML(typ="safe").load((ROOT / ".pre-commit-hooks.yaml").read_text())
SPECS = registry.CHECKS


def test_registry_is_not_empty_and_ids_are_unique():
    ids = [s.id for s in SPECS]
    assert ids and len(ids) == len(set(ids))
    assert all(s.group in registry.GROUPS for s in SPECS)
    groups = [registry.GROUPS.index(s.group) for s in SPECS]
    assert groups == sorted(groups), "checks must be grouped in preflight order"


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.id)
def test_check_module_contract(spec: registry.CheckSpec):
    module = spec.load()
    assert module.ID == spec.id
    assert module.__doc__ and module.__doc__.strip().splitlines()[0].endswith(".")
    assert callable(module.run) and module.RULES


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.id)
def test_check_has_test_file_script_hook_and_readme_entry(spec: registry.CheckSpec):
    assert (ROOT / "tests" / "checkers" / f"test_{spec.name}.py").is_file()
    script = ROOT / spec.script
    assert script.is_file() and f'run_script("{spec.id}")' in script.read_text()
    [hook] = [h for h in HOOKS if h["id"] == spec.hook_id]
    assert hook["entry"].split()[:3] == ["rowgate", "check", spec.id]
    assert tuple(hook["stages"]) == spec.stages
    assert hook.get("pass_filenames", True) == spec.pass_filenames
    assert f"`{spec.id}`" in (ROOT / "README.md").read_text()


def test_hooks_file_has_exactly_the_registered_checks_in_order():
    assert [h["id"] for h in HOOKS] == [s.hook_id for s in SPECS]


def test_rule_ids_are_unique_and_well_formed():
    rules = registry.all_rules()
    assert len({r.id for r in rules}) == len(rules)
    assert len({r.name for r in rules}) == len(rules)
    for r in rules:
        assert re.fullmatch(r"[A-Z]{2}\d{3}", r.id), r.id
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", r.name), r.name
