"""The rendered public documents match the records, and in a range every commit that moves a row's state updates them and every engine change updates the benchmarks, its row's ledger, or says why not."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ...checks.records.pending import record_range
from ...config import DocsConfig
from ...context import Context, NoRange, add_range_arguments
from ...files import select
from ...flagdecls import FlagDeclError
from ...gitio import TrailedCommit
from ...paths import CONTROL, escape
from ...records import Records
from ...render import load_views, stale_views
from ...results import CheckError, Finding, Result, Rule

ID = "doc-checkpoint"
RULES = (
    Rule("DC001", "rendered-doc-stale", "a rendered document differs from what `rowgate render` writes"),
    Rule("DC002", "state-change-without-render", "a commit moves a row's state but not its rendered views"),
    Rule(
        "DC003",
        "engine-change-without-bench",
        "a commit changes engine code without a benchmark note, a ledger entry of its row, or a trailer saying why not",
    ),
    Rule("DC004", "path-control-character", "a commit changes a file whose name holds a control character or newline"),
    Rule(
        "DC005",
        "checkpoint-without-docs",
        "a commit changes checkpoint paths but not every document its rule (docs.checkpoints) requires",
    ),
)
R_STALE, R_STATE, R_BENCH, R_CONTROL, R_CHECKPOINT = RULES
ROWS_DIR = ".agents/rows"


@dataclass(frozen=True)
class CommitChange:
    """What one commit did, as the range rules need it."""

    sha: str
    rows: tuple[str, ...]  # its Row: trailers
    bench_note: tuple[str, ...]  # its Bench-Impact: (or configured) trailers
    paths: tuple[str, ...]
    states: dict[str, tuple[str | None, str | None]]  # row file -> (old state, new state)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_range_arguments(parser)


def run(ctx: Context, args: argparse.Namespace) -> Result:
    docs = ctx.config.docs
    try:
        views = load_views(ctx.root, ctx.records, ctx.config)
    except FlagDeclError as exc:
        raise CheckError(
            f"cannot render {docs.environment}: {exc}", hint="declare flags with literal name, default, gates and doc"
        ) from None
    stale = stale_views(ctx.root, views)
    findings = check_rendered(stale)
    details = [line for diff in stale.values() for line in diff.splitlines()]
    since, source = (docs.since, "docs.since") if docs.since else (ctx.config.cutover, "config cutover")
    scope = ""
    try:
        rng = record_range(ctx, args, since, source)
        changes = load_changes(ctx, rng.spec)
    except NoRange:
        rng, changes = None, []  # no cutover, no start and no base: the rendered files are all there is to check
    if not changes and docs.checkpoints and (head := ctx.git.resolve(rng.head if rng else "HEAD")):
        # an empty range (a fresh clone at its upstream): the checkpoint rules judge the head commit itself,
        # as a checkpoint script run on the last commit does
        changes = load_changes(ctx, f"{head}^!" if ctx.git.resolve(f"{head}^") else head)
        scope = f" (the range is empty: {head[:12]}, the head commit, checked)"
    findings += check_changes(changes, ctx.records, docs) + check_checkpoints(changes, docs)
    ok = f"OK: {len(views)} rendered files up to date; {len(changes)} commits checked{scope}"
    unit = f"items ({len(views)} rendered files, {len(changes)} commits)"
    return Result.judge(ID, findings, len(views) + len(changes), unit, ok, details)


def load_changes(ctx: Context, rng: str) -> list[CommitChange]:
    """Three batched reads for the whole range: trailers, changed paths, and row state diffs."""
    trailer = ctx.config.docs.bench_trailer
    commits: list[TrailedCommit] = ctx.git.commits_with_trailers(rng, ("Row", trailer))
    paths = ctx.git.changed_paths(rng)
    states = ctx.git.key_changes(rng, ROWS_DIR, "state")
    return [
        CommitChange(
            c.commit.sha, c.rows, c.trailers[trailer], tuple(paths.get(c.commit.sha, ())), states.get(c.commit.sha, {})
        )
        for c in commits
        if not c.commit.is_merge
    ]


def check_rendered(stale: dict[str, str]) -> list[Finding]:
    out = []
    for rel, diff in stale.items():
        changed = sum(1 for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---"))
        out.append(
            R_STALE.finding(
                f"{rel} is out of date with the records ({changed} lines differ)",
                rel,
                None,
                "run `rowgate render` and commit the rendered files",
            )
        )
    return out


def check_changes(changes: list[CommitChange], records: Records, docs: DocsConfig) -> list[Finding]:
    out = []
    for ch in changes:
        short = ch.sha[:12]
        touched = set(ch.paths)
        for path, (old, new) in sorted(ch.states.items()):
            row_id = path.rsplit("/", 1)[-1].removesuffix(".yaml")
            row = records.rows.get(row_id)
            views = [docs.roadmap] + ([f"{docs.matrices_dir}/{row.model.area}.md"] if row else [])
            missing = [v for v in views if v not in touched]
            if missing:
                out.append(
                    R_STATE.finding(
                        f"commit {short} moves {row_id} from {old or '(new)'} to {new or '(removed)'} but does not "
                        f"update {', '.join(missing)}",
                        path,
                        None,
                        "run `rowgate render` and amend the commit with the rendered files",
                    )
                )
        for odd in sorted(p for p in ch.paths if any(c in CONTROL for c in p)):
            # Judged like any other path (the list is NUL-separated), and reported: a name like this splits
            # or forges lines in every tool that reads paths one per line.
            out.append(
                R_CONTROL.finding(
                    f"commit {short} changes {escape(odd)}, a file name with a control character or newline",
                    None,
                    None,
                    "rename the file (`git mv`) to a name of printable characters",
                )
            )
        engine = sorted(p for p in ch.paths if any(p.startswith(prefix) for prefix in docs.engine_paths))
        if engine and not ch.bench_note and docs.benchmarks not in touched and not _row_ledger(ch, records):
            more = f" (+{len(engine) - 1} more)" if len(engine) > 1 else ""
            out.append(
                R_BENCH.finding(
                    f"commit {short} changes engine code ({engine[0]}{more}) but updates neither {docs.benchmarks} "
                    f"nor a ledger entry of {', '.join(ch.rows) or 'its row'}, and has no {docs.bench_trailer}: trailer",
                    None,
                    None,
                    f"add the benchmark result, or a trailer `{docs.bench_trailer}: none (reason)`",
                )
            )
    return out


def check_checkpoints(changes: list[CommitChange], docs: DocsConfig) -> list[Finding]:
    """Each checkpoint rule on each commit: one finding per required path the commit leaves unchanged."""
    out = []
    for rule in docs.checkpoints:
        for ch in changes:
            triggers = sorted(set(select(ch.paths, rule.when, rule.exclude)))
            if not triggers:
                continue
            preview = ", ".join(escape(t) for t in triggers[:5]) + (
                f", ... (+{len(triggers) - 5})" if len(triggers) > 5 else ""
            )
            for need in rule.require:
                if need not in ch.paths:
                    out.append(
                        R_CHECKPOINT.finding(
                            f"commit {ch.sha[:12]} changes {rule.name} checkpoint paths ({preview}) but does not "
                            f"update {need} in the same change",
                            None,
                            None,
                            f"update {need} with the current stage or result in the same commit",
                        )
                    )
    return out


def _row_ledger(ch: CommitChange, records: Records) -> bool:
    """A ledger entry the commit writes that names one of the commit's rows."""
    for p in ch.paths:
        entry = records.ledger.get(p)
        if entry is not None and set(entry.model.rows) & set(ch.rows):
            return True
    return False
