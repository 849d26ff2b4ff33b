"""Name the upstream commit that fixed an inherited finding: the first commit after the merge base, on the
upstream's first-parent line, whose tree no longer has any of the gate's inherited findings.

Only that one gate runs per probe, in the baseline's worktree moved from commit to commit; the search is a
bisection (it assumes that once fixed, a finding stays fixed on the line), at most `max_probes` trees. A
probe that cannot verify (the gate errors there) counts as not fixed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Protocol

MAX_LINE = 4096  # first-parent commits considered between the merge base and the upstream tip


class Git(Protocol):
    def text(self, *args: str) -> str: ...


class FixTarget(Protocol):
    """A gate with inherited findings (checkers.baseline.Gate); the search sets its two fields."""

    check: str
    fixed_by: str | None
    fixed_note: str | None


# (commit, check) -> the identities of that check's findings on the commit's tree; None: it could not verify
Probe = Callable[[str, str], "Counter[str] | None"]


def find_fixes(
    git: Git,
    pending: Sequence[tuple[FixTarget, Counter[str]]],
    merge_base: str,
    tip: str,
    max_probes: int,
    probe: Probe,
) -> None:
    """Set `fixed_by` (and `fixed_note`) on every gate whose inherited findings (`pending`: each gate with the
    identities it inherited) the tip has fixed."""
    if not pending:
        return
    line = git.text("rev-list", "--first-parent", "--reverse", f"--max-count={MAX_LINE}", f"{merge_base}..{tip}")
    commits = line.split()
    if not commits or commits[-1] != tip:
        for g, _ in pending:
            g.fixed_note = "the upstream's line from the merge base is too long to search"
        return
    for gate, wanted in pending:

        def fixed(sha: str, gate: FixTarget = gate, wanted: Counter[str] = wanted) -> bool:
            found = probe(sha, gate.check)
            return found is not None and not (found & wanted)

        probes = 1
        if not fixed(tip):
            gate.fixed_note = f"still on the upstream tip {tip[:12]}"
            continue
        lo, hi = 0, len(commits) - 1  # commits[hi] is fixed; every index below lo is not
        while lo < hi and probes < max_probes:
            mid = (lo + hi) // 2
            probes += 1
            if fixed(commits[mid]):
                hi = mid
            else:
                lo = mid + 1
        gate.fixed_by = commits[hi]
        exact = lo == hi
        gate.fixed_note = (
            f"first fixed at {commits[hi][:12]} ({probes} trees probed)"
            if exact
            else f"fixed by {commits[hi][:12]} or an earlier commit after {commits[lo - 1][:12] if lo else 'the merge base'}"
            f" (probe bound {max_probes} reached)"
        )
