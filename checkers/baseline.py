"""Judge a branch against its merge base: every gate runs on the base's tree and on the head, and each
finding is *new* (only on the head), *inherited* (on both) or *fixed* (only on the base).

The base's tree is a temporary detached worktree (`git worktree add --detach --no-checkout`) filled from
the object store (no hook, filter or checkout program runs) and removed afterwards; the base is judged
with its own config. The gates that judge commits (the `commits` group) have no commits of their own on
the base: the branch's range is the head's alone, so their findings are new by definition and they are
not run there.

Finding identity (what matches a head finding to a base finding) is stable across trees: the rule id,
the path, the commit a commit-level finding is about (a commit keeps its sha in every tree), and the
message with line numbers and abbreviated shas blanked (`identity`). Findings match as a multiset, so two
equal findings on the head against one on the base are one inherited and one new.

For a gate with inherited findings, when the base ref's tip (the upstream) no longer has them, the first
commit after the merge base on the upstream's first-parent line whose tree has none of them is found by a
bisection over that gate alone, bounded by `max_probes` (checkers.baseline_fix)."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import registry
from .baseline_fix import find_fixes
from .context import Context
from .gitio import Git, GitError
from .preflight import run_preflight
from .results import EXIT_ERROR, EXIT_FAIL, EXIT_PASS, Finding, Result, Status

NEW, INHERITED, FIXED = "new", "inherited", "fixed"
SARIF_STATE = {NEW: "new", INHERITED: "unchanged", FIXED: "absent"}
# Blanked in a message before findings are matched: abbreviated or full shas (hex with a digit, so a word
# such as "defaced" stays), `path:LINE` and `line N`.
_SHA = re.compile(r"\b(?=[a-f]*[0-9])[0-9a-f]{7,40}\b")
_LINE = re.compile(r"(?<=\w):[0-9]+(?::[0-9]+)?\b|\bline [0-9]+\b|\blines [0-9]+-[0-9]+\b")


class Judged:
    """One finding of one gate with its baseline state, and whether its file is one the branch changed."""

    __slots__ = ("check", "finding", "state", "touched")

    def __init__(self, check: str, finding: Finding, state: str, touched: bool | None):
        self.check, self.finding, self.state, self.touched = check, finding, state, touched

    def to_json(self) -> dict[str, Any]:
        return {
            **self.finding._asdict(),
            "check": self.check,
            "state": self.state,
            "identity": identity(self.finding),
            "file_touched": self.touched,
        }


class Gate:
    """One gate judged on the base (None: not run there) and on the head, its findings with their states,
    and, for inherited findings the upstream has fixed, the first commit that fixed them."""

    __slots__ = ("base", "check", "fixed_by", "fixed_note", "head", "judged")

    def __init__(self, check: str, base: Result | None, head: Result, judged: list[Judged]):
        self.check, self.base, self.head, self.judged = check, base, head, judged
        self.fixed_by: str | None = None  # the upstream commit whose tree first has none of the inherited
        self.fixed_note: str | None = None  # how fixed_by was found, or why none was

    def of(self, state: str) -> list[Judged]:
        return [j for j in self.judged if j.state == state]

    @property
    def new_error(self) -> bool:
        """The head could not verify where the base could: that is the branch's own."""
        return self.head.status == Status.ERROR and (self.base is None or self.base.status != Status.ERROR)

    @property
    def inherited_error(self) -> bool:
        return self.head.status == Status.ERROR and self.base is not None and self.base.status == Status.ERROR

    def line(self) -> str:
        """One line, as a contributor would say it: "base fails 7; this branch fails those 7 plus 1"."""
        new, inherited, fixed = (len(self.of(s)) for s in (NEW, INHERITED, FIXED))
        if self.base is None:
            base = "base: not run (judges the branch's own commits)"
        elif self.base.status == Status.ERROR:
            base = "base could not verify"
        elif self.base.status == Status.SKIP:
            base = "base skips"
        else:
            base = f"base fails {inherited + fixed}" if inherited + fixed else "base passes"
        if self.head.status == Status.ERROR:
            head = f"this branch could not verify: {self.head.summary}"
        elif self.head.status == Status.SKIP:
            head = f"this branch skips: {self.head.summary}"
        elif not new and not inherited:
            head = "this branch passes" + (f" (fixes {fixed})" if fixed else "")
        else:
            head = "this branch fails "
            if inherited:
                head += f"those {inherited}" if not fixed else f"{inherited} of those (fixes {fixed})"
                head += f" plus {new}" if new else ""
            else:
                head += f"{new}" + (f" (fixes {fixed})" if fixed else "")
        line = f"{base}; {head}"
        if self.fixed_by:
            line += f"; fixed upstream since {self.fixed_by[:12]}: rebase onto it"
        return line


class Baseline:
    """The whole comparison: what was compared, the gates in registry order, and the exit status."""

    def __init__(self, ref: str, source: str, base_sha: str, merge_base: str, head: str, gates: list[Gate]):
        self.ref, self.source, self.base_sha, self.merge_base, self.head = ref, source, base_sha, merge_base, head
        self.gates = gates

    def describe(self) -> str:
        return (
            f"baseline: base {self.ref} ({self.source}) = {self.base_sha[:12]}; merge base {self.merge_base[:12]}; "
            f"head {self.head[:12]}"
        )

    def exit_code(self, fail_on_inherited: bool = False) -> int:
        """Only what the branch brought counts (new findings, a gate the head alone cannot verify);
        `fail_on_inherited` makes the inherited ones count too."""
        if any(g.new_error or (fail_on_inherited and g.inherited_error) for g in self.gates):
            return EXIT_ERROR
        states = {NEW, INHERITED} if fail_on_inherited else {NEW}
        if any(j.state in states for g in self.gates for j in g.judged):
            return EXIT_FAIL
        return EXIT_PASS


def run_baseline(ctx: Context, ref: str | None = None, only: list[str] | None = None, max_probes: int = 10) -> Baseline:
    """Run the gates on the merge base of `ref` (default: the resolved base) and HEAD, and compare."""
    notes, ctx.notes = ctx.notes, io.StringIO()  # the head's run below prints the range once
    try:
        rng = ctx.range(ref or None)
        merge_base, head = rng.merge_base, rng.head
    finally:
        ctx.notes = notes
    head_results = run_preflight(ctx, only, rng.ref)
    if merge_base == head:  # nothing of its own: the commit gates had no range, which is not a failure here
        why = "the branch has no commits of its own (head is the merge base)"
        head_results = [r if _tree_gate(r.check) else Result.skip(r.check, why) for r in head_results]
    base_only = [r.check for r in head_results if _tree_gate(r.check)]
    base_results: dict[str, Result] = {}
    touched = set(ctx.git.text("diff", "--name-only", "-z", "--no-renames", merge_base, head).split("\0")) - {""}
    with worktree(ctx.git, merge_base) as tree:
        if base_only:
            for r in run_preflight(context_at(tree, ctx), base_only, rng.ref):
                base_results[r.check] = r
        gates = [_compare(r, base_results.get(r.check), touched) for r in head_results]
        if rng.base != merge_base and max_probes > 0:  # 0: no search for upstream fixes

            def probe(sha: str, check: str) -> Counter[str] | None:
                checkout(ctx.git, tree, sha)
                results = run_preflight(context_at(tree, ctx), [check], sha)
                if not results or results[0].status == Status.ERROR:
                    return None
                return Counter(identity(f) for f in findings_of(results[0]))

            pending = [(g, Counter(identity(j.finding) for j in g.of(INHERITED))) for g in gates if g.of(INHERITED)]
            find_fixes(ctx.git, pending, merge_base, rng.base, max_probes, probe)
    return Baseline(rng.ref, rng.source, rng.base, merge_base, head, gates)


def _tree_gate(check: str) -> bool:
    spec = registry.get(check)
    return spec is not None and spec.group != "commits"


def _compare(head: Result, base: Result | None, touched: set[str]) -> Gate:
    """Match the head's findings to the base's by identity, as multisets."""
    head_findings = findings_of(head)
    base_findings = findings_of(base) if base is not None else []
    left = Counter(identity(f) for f in base_findings)
    judged = []
    for f in head_findings:
        key = identity(f)
        state = INHERITED if left[key] > 0 else NEW
        left[key] -= state == INHERITED
        judged.append(Judged(head.check, f, state, None if f.path is None else f.path in touched))
    for f in base_findings:
        key = identity(f)
        if left[key] > 0:
            left[key] -= 1
            judged.append(Judged(head.check, f, FIXED, None if f.path is None else f.path in touched))
    return Gate(head.check, base, head, judged)


def findings_of(result: Result) -> list[Finding]:
    """A failing result's findings; a failure with none is one finding of its own (its summary), so it
    still takes part in the comparison."""
    if result.status != Status.FAIL:
        return []
    if result.findings:
        return list(result.findings)
    return [Finding(rule=result.check, name=result.check, message=result.summary)]


def identity(f: Finding) -> str:
    """What makes two findings in two trees the same finding (documented in docs/checks/baseline.md)."""
    message = _SHA.sub("<sha>", _LINE.sub("", f.message))
    return "\x1f".join((f.rule, f.path or "", f.commit or "", message))


def context_at(tree: Path, ctx: Context) -> Context:
    """A context for another tree of the same repository, with that tree's own config; what it resolves
    is not printed again."""
    from .config import parse_source
    from .configsource import locate

    source = locate(tree)
    return Context(root=tree, config=parse_source(source), env=ctx.env, notes=io.StringIO(), source=source)


@contextlib.contextmanager
def worktree(git: Git, commit: str) -> Iterator[Path]:
    """A temporary detached worktree at `commit`, removed (with its administrative files) afterwards.
    Made with `--no-checkout` and filled from the object store (`materialize`): a checkout would run the
    filter drivers the repository configures, and a tree being judged must not run programs."""
    parent = Path(tempfile.mkdtemp(prefix="rowgate-baseline-"))
    tree = parent / "tree"
    try:
        git.run("worktree", "add", "--quiet", "--no-checkout", "--detach", str(tree), commit, timeout_s=600)
        materialize(Git(tree, git.timeout_s), tree, commit)
        yield tree
    finally:
        try:
            git.run("worktree", "remove", "--force", str(tree))
        except GitError:  # half made: its folder goes, then prune drops the entry of a folder that is gone
            shutil.rmtree(parent, ignore_errors=True)
            with contextlib.suppress(GitError):
                git.run("worktree", "prune")
        shutil.rmtree(parent, ignore_errors=True)


def materialize(git: Git, tree: Path, commit: str) -> None:
    """Make the files of `tree` exactly those of `commit`, its index and detached HEAD too: blobs are
    written as stored (no filter, no line-ending conversion), links as links (checks confine every path
    they open), submodules as empty folders. Two git processes: one `ls-tree`, one `cat-file --batch`."""
    for child in tree.iterdir():
        if child.name != ".git":
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    listing = git.run("ls-tree", "-r", "-z", "--full-tree", commit).stdout.decode("utf-8", "surrogateescape")
    entries = []
    for record in listing.split("\0"):
        if record:
            meta, path = record.split("\t", 1)
            mode, kind, sha = meta.split()
            entries.append((mode, kind, sha, path))
    blobs = [e for e in entries if e[1] == "blob"]
    out = git.run("cat-file", "--batch", input="".join(f"{e[2]}\n" for e in blobs).encode(), timeout_s=600).stdout
    at = 0
    for mode, _, _, path in blobs:
        header_end = out.index(b"\n", at)
        size = int(out[at:header_end].split()[2])
        data = out[header_end + 1 : header_end + 1 + size]
        at = header_end + 2 + size
        target = tree / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if mode == "120000":
            target.symlink_to(data.decode("utf-8", "surrogateescape"))
            continue
        target.write_bytes(data)
        if mode == "100755":
            target.chmod(0o755)
    for mode, _, _, path in entries:
        if mode == "160000":
            (tree / path).mkdir(parents=True, exist_ok=True)
    git.run("update-ref", "--no-deref", "HEAD", commit)
    git.run("read-tree", commit)


def checkout(git: Git, tree: Path, commit: str) -> None:
    """Move the worktree at `tree` to `commit`, as it was made (from the object store)."""
    materialize(Git(tree, git.timeout_s), tree, commit)
