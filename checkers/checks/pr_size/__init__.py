"""Every changed path fits a path class within its review budget, and paired paths change together."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field

from ...checks.pr_size.pathclass import Classifier, Pairing
from ...config import PrSizeConfig
from ...context import Context, add_range_arguments
from ...gitio import DiffStat
from ...results import CheckError, Finding, Result, Rule

ID = "pr-size"
RULES = (
    Rule("PS001", "path-unclassified", "a changed path (every tracked path in whole-tree mode) fits no path class"),
    Rule("PS002", "class-over-budget", "a path class changes more lines than its review budget"),
    Rule("PS003", "pair-missing", "a path changed without the path a pairing rule requires to change with it"),
)
R_UNCLASSIFIED, R_BUDGET, R_PAIR = RULES
GENERATED_ATTR = "linguist-generated"
CLASSES_AT = "pr_size.classes in .agents/config.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_range_arguments(parser)
    parser.add_argument(
        "--all-files", action="store_true", help="classify every tracked file at --head instead of a range's changes"
    )


@dataclass
class Tally:
    """One class's share of a change (lines weighted by the class's deletion weight)."""

    name: str
    budget: int | None
    deletion_weight: float
    files: int = 0
    added: int = 0
    deleted: int = 0

    @property
    def lines(self) -> int:
        return math.ceil(self.added + self.deleted * self.deletion_weight)


@dataclass
class Report:
    tallies: dict[str, Tally]
    findings: list[Finding] = field(default_factory=list)
    files: int = 0

    @property
    def lines(self) -> int:
        return sum(t.lines for t in self.tallies.values())


def run(ctx: Context, args: argparse.Namespace) -> Result:
    cfg = ctx.config.pr_size
    if not cfg.classes:
        raise CheckError("no path classes are configured", hint=f"add {CLASSES_AT} (see README, Checks)")
    classifier, git = Classifier(cfg.classes), ctx.git
    if args.all_files:
        return _tree_result(ctx, classifier, git.must_resolve(args.head or "HEAD", "head"), None)
    # A shallow clone is judged where the range lies in the fetched history: a merge base found there is the
    # true one (a shallow cut hides only ancestors), and the range refuses when a cut lies inside it.
    rng = ctx.range(args.base, args.head)
    if rng.merge_base == rng.head:
        if rng.base != rng.head:
            raise CheckError(
                f"head {rng.head[:12]} is behind base {rng.ref} ({rng.base[:12]}): the range has no changes of its own",
                hint="check out the branch to measure, or pass the --base it was built on",
            )
        return _tree_result(
            ctx,
            classifier,
            rng.head,
            f"empty range (head {rng.head[:12]} is the merge base with {rng.ref}), so the whole tree was classified",
        )
    stats = git.numstat(rng.merge_base, rng.head, renames=cfg.renames == "edits")
    # Generated files are excluded as the base's .gitattributes marks them: the branch's own change to
    # them (marking its files linguist-generated) is not the branch's to judge, so it is counted and said.
    paths = [s.path for s in stats]
    generated = git.attr_set(paths, GENERATED_ATTR, rev=rng.merge_base)
    self_marked = sorted(git.attr_set(paths, GENERATED_ATTR) - generated)
    report = judge_range(stats, generated, classifier, cfg)
    if report.files == 0:
        return _tree_result(
            ctx,
            classifier,
            rng.head,
            f"every file the range changes is generated ({len(stats)} files), so the whole tree was classified",
        )
    binaries = [s for s in stats if s.binary and s.path not in generated]
    sizes = git.blob_sizes(
        [f"{rev}:{p}" for s in binaries for rev, p in ((rng.merge_base, s.old_path or s.path), (rng.head, s.path))]
    )
    details = budget_table(report)
    details += [
        f"binary {s.path}: {_size(sizes[f'{rng.merge_base}:{s.old_path or s.path}'])} -> "
        f"{_size(sizes[f'{rng.head}:{s.path}'])} bytes"
        for s in binaries
    ]
    details += [
        f"generated (excluded) {s.path}: +{s.added or 0} -{s.deleted or 0}" for s in stats if s.path in generated
    ]
    details += [
        f"counted {p}: marked linguist-generated only by this branch's .gitattributes (judged by the base's)"
        for p in self_marked
    ]
    ok = f"OK: every path class is within its review budget ({report.files} files, {report.lines} lines)"
    return Result.judge(ID, report.findings, report.files, "changed files", ok, details)


def judge_range(stats: list[DiffStat], generated: set[str], classifier: Classifier, cfg: PrSizeConfig) -> Report:
    """Classify each changed file, add its lines to its class, and apply budgets and pairing rules."""
    report = _new_report(classifier, cfg)
    changed: set[str] = set()
    for s in stats:
        if s.path in generated:
            continue
        changed.update(p for p in (s.path, s.old_path) if p)
        name = classifier.classify(s.path)
        if name is None:
            report.findings.append(_unclassified(classifier, s.path))
            continue
        tally = report.tallies[name]
        tally.files += 1
        tally.added += s.added or 0
        tally.deleted += s.deleted or 0
        report.files += 1
    report.files += len(report.findings)
    for t in report.tallies.values():
        if t.budget is not None and t.lines > t.budget:
            report.findings.append(
                R_BUDGET.finding(
                    f"{t.name} changes {t.lines} lines (budget {t.budget})",
                    None,
                    None,
                    f"split the change into smaller pull requests, or raise the budget of {t.name} "
                    f"in {CLASSES_AT} with a reason",
                )
            )
    report.findings += pair_findings(sorted(changed), [Pairing.compile(r) for r in cfg.pairs])
    return report


def judge_tree(paths: list[str], generated: set[str], classifier: Classifier) -> Report:
    """Whole-tree mode: every tracked path (generated ones aside) must fit a class; no budgets."""
    report = _new_report(classifier, None)
    for path in paths:
        if path in generated:
            continue
        report.files += 1
        name = classifier.classify(path)
        if name is None:
            report.findings.append(_unclassified(classifier, path))
        else:
            report.tallies[name].files += 1
    return report


def pair_findings(changed: list[str], pairings: list[Pairing]) -> list[Finding]:
    present, findings = set(changed), []
    for pairing in pairings:
        for path in changed:
            need = pairing.required(path)
            if need is not None and not present.intersection(need):
                names = (
                    f"{need[0]} did not"
                    if len(need) == 1
                    else f"neither {need[0]} nor {need[1]} did"
                    if len(need) == 2
                    else f"none of {', '.join(need)} did"
                )
                findings.append(
                    R_PAIR.finding(
                        f"{path} changed but {names} (pairing rule {pairing.rule.name})",
                        path,
                        None,
                        f"change {' or '.join(need)} in the same range (pr_size.pairs in .agents/config.yaml)",
                    )
                )
    return findings


def budget_table(report: Report, whole_tree: bool = False) -> list[str]:
    rows = [f"{'class':<20} {'files':>6} {'lines':>7} {'budget':>7}  verdict"]
    for t in report.tallies.values():
        if not t.files:
            continue
        if whole_tree:
            rows.append(f"{t.name:<20} {t.files:>6} {'-':>7} {'-':>7}  classified")
            continue
        verdict = "unbudgeted" if t.budget is None else "ok" if t.lines <= t.budget else f"over by {t.lines - t.budget}"
        rows.append(f"{t.name:<20} {t.files:>6} {t.lines:>7} {'-' if t.budget is None else t.budget:>7}  {verdict}")
    unknown = sum(f.rule == R_UNCLASSIFIED.id for f in report.findings)
    if unknown:
        rows.append(f"{'(unclassified)':<20} {unknown:>6} {'-':>7} {'-':>7}  no class")
    return rows


def _tree_result(ctx: Context, classifier: Classifier, head: str, note: str | None) -> Result:
    paths = ctx.git.tree_paths(head)
    generated = ctx.git.attr_set(paths, GENERATED_ATTR)
    report = judge_tree(paths, generated, classifier)
    details = ([note + ":"] if note else []) + budget_table(report, whole_tree=True)
    details += [f"generated (excluded) {p}" for p in paths if p in generated]
    ok = f"OK: all {report.files} tracked files fit a path class"
    ok = f"OK: {note}: all {report.files} tracked files fit a path class" if note else ok + " (whole tree)"
    result = Result.judge(ID, report.findings, report.files, "tracked files", ok, details)
    if note and result.findings:
        result.summary += f" ({note})"
    return result


def _new_report(classifier: Classifier, cfg: PrSizeConfig | None) -> Report:
    """A report with one tally per class, in precedence order."""
    default = cfg.deletion_weight if cfg else 1.0
    return Report(
        {
            c.name: Tally(c.name, c.budget, default if c.deletion_weight is None else c.deletion_weight)
            for c in classifier.classes
        }
    )


def _unclassified(classifier: Classifier, path: str) -> Finding:
    return R_UNCLASSIFIED.finding(
        f"{path} fits no path class (closest: {classifier.closest(path)})",
        path,
        None,
        f"add a pattern that covers it to a class in {CLASSES_AT} (the first matching class wins)",
    )


def _size(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"
