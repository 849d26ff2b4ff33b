"""The one ordered registry of checks. The CLI, the preflight, the scripts and `.pre-commit-hooks.yaml`
all come from it (a meta-test proves they agree). Order is preflight order, grouped by what a check reads:
records first (cheap, local), then the tree, then commits, then build outputs."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import NamedTuple

from .results import Rule


class CheckSpec(NamedTuple):
    id: str
    module: str  # module under the package's checks/: a package `<name>`, or `records.<name>`
    group: str  # records | tree | commits | build
    script: str  # scripts/<conventional name>
    stages: tuple[str, ...]  # pre-commit stages of its hook
    summary: str
    pass_filenames: bool = False  # a commit-msg hook receives the message file
    records: bool = False  # reads .agents/ records: skips, not configured, in a repository without them
    preflight: bool = True  # False: judges an input the preflight does not have (a PR body); run on its own

    @property
    def name(self) -> str:
        """The module's own name (`agent_record`), which names its test file `tests/checkers/test_<name>.py`."""
        return self.module.rpartition(".")[2]

    @property
    def hook_id(self) -> str:
        return f"rowgate-{self.id}"

    def load(self) -> ModuleType:
        return importlib.import_module(f".checks.{self.module}", __package__)  # `checkers`, or `rowgate` installed


GROUPS = ("records", "tree", "commits", "build")

CHECKS: tuple[CheckSpec, ...] = (
    # records
    CheckSpec(
        "agent-record",
        "records.agent_record",
        "records",
        "scripts/check-agent-record.py",
        ("pre-commit",),
        "rows, specs, claims, issues and ledger entries are well-formed and agree",
        records=True,
    ),
    CheckSpec(
        "live-rows",
        "records.live_rows",
        "records",
        "scripts/audit-live-rows.py",
        ("pre-push",),
        "rows in an active state have a live claim and branch; claims point at active rows",
        records=True,
    ),
    CheckSpec(
        "doc-checkpoint",
        "records.doc_checkpoint",
        "records",
        "scripts/check-doc-checkpoint.py",
        ("pre-commit",),
        "rendered documents match the records; a change that moves a row's state updates them",
        records=True,
    ),
    CheckSpec(
        "evidence",
        "evidence",
        "records",
        "scripts/check-evidence.py",
        ("pre-commit",),
        "numbers cited from the ledger are in their records; headlines stand on clean, current records",
    ),
    # tree
    CheckSpec(
        "env-doc",
        "env_doc",
        "tree",
        "scripts/check-env-doc.py",
        ("pre-commit",),
        "every env var the code reads is documented or classified, and every such name is still read",
    ),
    CheckSpec(
        "gemv-invocation",
        "gemv_invocation",
        "tree",
        "scripts/check-gemv-invocation-consistency.py",
        ("pre-commit",),
        "matmul/GEMV call sites keep the caller's dtype and named tuning constants",
    ),
    # commits
    CheckSpec(
        "role-discipline",
        "records.role_discipline",
        "commits",
        "scripts/check-role-discipline.py",
        ("pre-push",),
        "changes reach main through a row: a row/<ID> branch merge, or a commit that names its row",
        records=True,
    ),
    CheckSpec(
        "commit-trailers",
        "commit_trailers",
        "commits",
        "scripts/check-commit-trailers.py",
        ("commit-msg",),
        "every commit in the range, or one message, carries the trailer contract",
        pass_filenames=True,
    ),
    CheckSpec(
        "pr-body",
        "pr_body",
        "commits",
        "scripts/check-pr-body.py",
        ("manual",),
        "a PR body carries the trailer contract and its Closes/Refs issue references hold",
        records=True,
        preflight=False,
    ),
    CheckSpec(
        "pr-size",
        "pr_size",
        "commits",
        "scripts/check-pr-size.py",
        ("pre-push",),
        "every changed path fits a path class within its review budget; paired paths change together",
    ),
    # tree
    # build
    CheckSpec(
        "gencode",
        "gencode",
        "build",
        "scripts/check-gencode.py",
        ("manual",),
        "the arch list compiled into each CUDA object equals the feature table's",
    ),
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
