"""What a row must have to be in a state, and what its references must point at: the one implementation
that both the agent-record check and the `rowgate row`/`claim` commands use."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...checks.records.rules import R_DANGLING, R_STATE
from ...config import RowsConfig, State
from ...files import select
from ...gitio import Git
from ...paths import OutsideRepo, confine, escape
from ...records import Records, Row, key_line
from ...results import Finding


@dataclass
class Tree:
    """The inputs the requirements read: the work tree, the records, and the closing commits' status."""

    root: Path
    records: Records
    rows: RowsConfig
    known_commits: set[str] = field(default_factory=set)  # closing commits that exist
    ancestors: set[str] = field(default_factory=set)  # ... and are ancestors of HEAD
    _lines: dict[str, int | None] = field(default_factory=dict)

    def line_count(self, rel: str) -> int | None:
        """Lines in a tracked-tree file, None when it is not a file (cached: each file read once)."""
        if rel not in self._lines:
            from ...boundedio import SOURCE_CAP, Unreadable, read_bytes

            try:  # an anchor that is too big, a FIFO or a link out counts as no file
                self._lines[rel] = len(read_bytes(self.root / rel, SOURCE_CAP, self.root, rel).splitlines())
            except (FileNotFoundError, Unreadable):
                self._lines[rel] = None
        return self._lines[rel]


def load_tree(root: Path, rows: RowsConfig, records: Records, git: Git, extra: Sequence[Row] = ()) -> Tree:
    """Resolve every closing commit once: one batch existence query, one ancestry query for the full shas
    (and one ancestry test per abbreviated one)."""
    shas = sorted(
        {r.model.closing_commit for r in records.rows.values() if r.model.closing_commit}
        | {r.closing_commit for r in extra if r.closing_commit}
    )
    full = git.existing_commits(shas)
    # an abbreviated sha (as a markdown table writes it) counts when it names an existing commit
    known = {s for s in shas if s in full or any(f.startswith(s) for f in full)}
    head = git.resolve("HEAD")
    ancestors = git.ancestors_among(sorted(known & full), head) if head else set()
    ancestors |= {s for s in known - full if head and git.is_ancestor(s, head)}  # git resolves abbreviations
    return Tree(root, records, rows, known, ancestors)


def row_findings(
    row: Row, state: State, tree: Tree, path: str | None = None, doc: Any = None, skip_spec: bool = False
) -> list[Finding]:
    """Every unmet requirement of `state` for `row` (AR004, at the row's `state:` line), then every dangling
    reference the row holds (AR003, at the key that holds it). `path` and `doc` locate the row's file;
    `skip_spec` leaves out what is about its spec (`rowgate row new` writes the spec after the row)."""
    out = state_findings(row, state, tree, path, doc) + reference_findings(row, tree, path, doc)
    return [f for f, fld in out if not (skip_spec and fld == "spec")]


def state_findings(
    row: Row, state: State, tree: Tree, path: str | None = None, doc: Any = None
) -> list[tuple[Finding, str]]:
    """Each finding with the row key it is about."""
    rule = tree.rows.states.get(state)
    if rule is None:
        return []
    out: list[tuple[Finding, str]] = []
    line = key_line(doc, "state") if doc is not None else None

    def need(fld: str, what: str, message: str, hint: str) -> None:
        out.append((R_STATE.finding(f"state {state} needs {what}: {message}", path, line, hint), fld))

    if rule.claim and not row.claim:
        need("claim", "a live claim", "claim is null", f"claim it: rowgate claim {row.id} --branch row/{row.id}")
    if rule.spec:
        spec = tree.records.specs.get(row.spec) if row.spec else None
        if not row.spec:
            need("spec", "a spec", "spec is null", f"write .agents/specs/{row.id}.md and set spec: to its path")
        elif spec is not None:
            missing = [s for s in tree.rows.spec_sections if s not in spec.sections]
            if missing:
                need(
                    "spec",
                    "a spec with sections " + ", ".join(tree.rows.spec_sections),
                    f"{row.spec} lacks {', '.join(missing)}",
                    f"add a '## {missing[0]}' section to {row.spec}",
                )
    if rule.anchors:
        paths = [split_anchor(a)[0] for a in row.anchors]
        has_test, has_code = _anchor_classes(paths, tree.rows)
        if not (has_test and has_code):
            kind = "test" if not has_test else "code"
            need(
                "anchors",
                "code and test anchors",
                f"no {kind} anchor among {row.anchors}",
                f"add a {kind} path (path or path:line) to anchors:",
            )
    if rule.evidence and not row.evidence:
        need(
            "evidence",
            "ledger evidence",
            "evidence is empty",
            "add the ledger entries (.agents/ledger/<date>-<slug>.json) that prove it to evidence:",
        )
    if rule.closing_commit:
        sha = row.closing_commit
        if not sha:
            need(
                "closing_commit",
                "a closing commit",
                "closing_commit is null",
                "set closing_commit: to the full sha of the commit that finished the row",
            )
        elif sha in tree.known_commits and sha not in tree.ancestors:
            need(
                "closing_commit",
                "a closing commit that is an ancestor of HEAD",
                f"{sha[:12]} is not an ancestor of HEAD",
                "name a commit on this branch's history",
            )
    if rule.blocker and row.blocker is None:
        need(
            "blocker",
            "a blocker and an unblocking condition",
            "blocker is null",
            "set blocker: {reason: ..., unblock_when: ...}",
        )
    return out


def reference_findings(row: Row, tree: Tree, row_path: str | None = None, doc: Any = None) -> list[tuple[Finding, str]]:
    """Each finding with the row key it is about (and is placed at)."""
    rec, out = tree.records, []

    def bad(fld: str, message: str, hint: str) -> None:
        out.append((R_DANGLING.finding(message, row_path, key_line(doc, fld) if doc is not None else None, hint), fld))

    if row.spec and row.spec not in rec.specs:
        bad("spec", f"spec {row.spec} does not exist", f"write it, or set spec: .agents/specs/{row.id}.md")
    if row.claim and (tree.rows.inactive_claims == "checked" or row.state in tree.rows.active_states):
        claim = rec.claims.get(row.claim)
        if claim is None:
            bad(
                "claim",
                f"claim {row.claim} does not exist in .agents/claims/",
                f"claim the row (rowgate claim {row.id} --branch row/{row.id}) or set claim: null",
            )
        elif row.id not in claim.model.row_ids:
            bad(
                "claim",
                f"claim {row.claim} is for row {', '.join(claim.model.row_ids)}, not {row.id}",
                "point claim: at this row's own claim",
            )
    for anchor in row.anchors:
        path, line = split_anchor(anchor)
        try:
            confine(tree.root, path)
        except OutsideRepo as exc:
            bad(
                "anchors",
                f"anchor {escape(anchor)} is not a path inside the repository: {exc}",
                "anchors are paths relative to the repository root",
            )
            continue
        count = tree.line_count(path)
        lines = anchor_lines(anchor)
        if count is None and not (tree.root / path).is_dir():
            bad("anchors", f"anchor {anchor} does not exist in the tree", "fix the path or remove the anchor")
        elif lines and (count is None or not all(1 <= n <= count for n in lines)):
            bad(
                "anchors",
                f"anchor {anchor} is out of range ({path} has {count or 0} lines)",
                "point the anchor at a line that exists",
            )
    for entry in row.evidence:
        loaded = rec.ledger.get(entry)
        if loaded is None:
            bad(
                "evidence",
                f"evidence {entry} is not a ledger entry under .agents/ledger/",
                "name an existing .agents/ledger/<date>-<slug>.json",
            )
        elif row.id not in loaded.model.rows:
            bad(
                "evidence",
                f"ledger entry {entry} does not name {row.id} (rows: {loaded.model.rows})",
                f"add {row.id} to the entry's rows or drop it from evidence:",
            )
    if row.closing_commit and row.closing_commit not in tree.known_commits:
        bad(
            "closing_commit",
            f"closing commit {row.closing_commit[:12]} does not exist in this repository",
            "fetch it, or name the full sha of a commit that exists",
        )
    # intake records filed where they belong (a misfiled one is reported on its own by agent-record)
    filed = {
        i.model.number
        for i in rec.issues
        if i.model.row == row.id and i.path == f".agents/issues/{row.id}/ISSUE-{i.model.number}.md"
    }
    spec = rec.specs.get(row.spec) if row.spec else None
    for number in row.issues:
        if number not in filed:
            bad(
                "issues",
                f"issue #{number} has no intake record .agents/issues/{row.id}/ISSUE-{number}.md",
                "file the intake record under this row",
            )
        if spec is not None and number not in spec.issues:
            bad("issues", f"issue #{number} is not listed in {row.spec}", f"list #{number} under '## Issues'")
    for number in sorted(filed - set(row.issues)):  # an intake record filed under the row is the row's issue
        bad(
            "issues",
            f"issue #{number} is filed under .agents/issues/{row.id}/ but not in the row's issues: {row.issues}",
            f"add {number} to issues: (and list #{number} in the spec)",
        )
    return out


_LINES = re.compile(r"\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*")


def split_anchor(anchor: str) -> tuple[str, int | None]:
    """`path:line` or `path:line,line-line` -> (path, first line); a plain path -> (path, None)."""
    head, _, tail = anchor.rpartition(":")
    if head and _LINES.fullmatch(tail):
        return head, int(re.split(r"[,-]", tail, maxsplit=1)[0])
    return anchor, None


def anchor_lines(anchor: str) -> list[int]:
    """Every line an anchor names: `a.cpp:3,10-12` -> [3, 10, 12] (a range's two ends)."""
    head, _, tail = anchor.rpartition(":")
    if not head or not _LINES.fullmatch(tail):
        return []
    return [int(n) for n in re.split(r"[,-]", tail)]


def _anchor_classes(paths: list[str], rows: RowsConfig) -> tuple[bool, bool]:
    """Whether some anchor is a test, and whether some anchor is code (configured globs may overlap)."""
    tests = select(paths, rows.test_anchors) if rows.test_anchors is not None else [p for p in paths if _is_test(p)]
    if rows.code_anchors is not None:
        return bool(tests), bool(select(paths, rows.code_anchors))
    return bool(tests), len(tests) < len(paths)


def _is_test(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return path.startswith("tests/") or "/tests/" in path or name.startswith("test_") or name.endswith("_test.py")
