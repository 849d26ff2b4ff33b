"""The one ordered registry of checks. The CLI, the preflight, the scripts and `.pre-commit-hooks.yaml`
all come from it (a meta-test proves they agree). Order is preflight order, grouped by what a check reads:
records first (cheap, local), then the tree, then commits, then build outputs."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

from checkers.results import Rule


@dataclass(frozen=True)
class CheckSpec:
    id: str
    module: str  # module under checkers.checks
    group: str  # records | tree | commits | build
    script: str  # scripts/<conventional name>
    stages: tuple[str, ...]  # pre-commit stages of its hook
    summary: str
    pass_filenames: bool = False  # a commit-msg hook receives the message file

    @property
    def hook_id(self) -> str:
        return f"rowgate-{self.id}"

    def load(self) -> ModuleType:
        return importlib.import_module(f"checkers.checks.{self.module}")


GROUPS = ("records", "tree", "commits", "build")

CHECKS: tuple[CheckSpec, ...] = (
    # records
    CheckSpec("agent-record", "agent_record", "records", "scripts/check-agent-record.py", ("pre-commit",),
              "rows, specs, claims, issues and ledger entries are well-formed and agree"),
    # tree
    CheckSpec("gemv-invocation", "gemv_invocation", "tree", "scripts/check-gemv-invocation-consistency.py",
              ("pre-commit",), "matmul/GEMV call sites keep the caller's dtype and named tuning constants"),
    # build
    CheckSpec("gencode", "gencode", "build", "scripts/check-gencode.py", ("manual",),
              "the arch list compiled into each CUDA object equals the feature table's"),
)


def get(check_id: str) -> CheckSpec | None:
    return next((c for c in CHECKS if c.id == check_id), None)


def all_rules() -> list[Rule]:
    rules: list[Rule] = []
    for spec in CHECKS:
        rules.extend(spec.load().RULES)
    return rules


def find_rule(key: str) -> tuple[CheckSpec, Rule] | None:
    """A rule by id (`TR001`) or name (`trailer-missing-row`), case-insensitive for the id."""
    for spec in CHECKS:
        for rule in spec.load().RULES:
            if key.upper() == rule.id or key == rule.name:
                return spec, rule
    return None
