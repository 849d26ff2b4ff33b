"""Name the upstream commit that fixed an inherited finding: the first commit after the merge base, on the
upstream's first-parent line, whose tree no longer has any of the gate's inherited findings.

Only that one gate runs per probe, in the baseline's worktree moved from commit to commit; the search is a
bisection (it assumes that once fixed, a finding stays fixed on the line), at most `max_probes` trees. A
probe that cannot verify (the gate errors there) counts as not fixed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from .preflight import run_preflight
from .results import Status

if TYPE_CHECKING:
    from .baseline import Gate
    from .context import Context

MAX_LINE = 4096  # first-parent commits considered between the merge base and the upstream tip


def find_fixes(ctx: Context, tree: Path, gates: list[Gate], merge_base: str, tip: str, max_probes: int) -> None:
    """Set `fixed_by` (and `fixed_note`) on every gate with inherited findings that the tip has fixed."""
    from .baseline import INHERITED, checkout, context_at, findings_of, identity

    pending = [g for g in gates if g.of(INHERITED)]
    if not pending:
        return
    line = ctx.git.text("rev-list", "--first-parent", "--reverse", f"--max-count={MAX_LINE}", f"{merge_base}..{tip}")
    commits = line.split()
    if not commits or commits[-1] != tip:
        for g in pending:
            g.fixed_note = "the upstream's line from the merge base is too long to search"
        return
    for gate in pending:
        wanted = Counter(identity(j.finding) for j in gate.of(INHERITED))

        def fixed(sha: str, gate: Gate = gate, wanted: Counter[str] = wanted) -> bool:
            checkout(ctx.git, tree, sha)
            results = run_preflight(context_at(tree, ctx), [gate.check], sha)
            if not results or results[0].status == Status.ERROR:
                return False
            return not (Counter(identity(f) for f in findings_of(results[0])) & wanted)

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
