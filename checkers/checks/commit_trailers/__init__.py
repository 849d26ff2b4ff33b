"""Every commit in the range, or the one message given, carries the configured trailer contract."""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from ...context import Context, NoRange, Range, add_range_arguments
from ...gitio import EMPTY_TREE, Commit
from ...paths import OutsideRepo, confine
from ...results import CheckError, Finding, Result, Status
from ...safe_regex import SafePattern, compile_pattern
from ...trailers.contract import RULES, Compiled, Facts, R, compile_contract, judge
from ...trailers.message import Message, read_message
from ...trailers.presets import DCO_FIX, PRESETS

if TYPE_CHECKING:
    from ...config import TrailersConfig

ID = "commit-trailers"
# The config sections this check reads: the CLI serves them from the validated-config cache
# (checkers.configcache), so a commit-msg hook or a range check starts without importing pydantic.
CONFIG_SECTIONS = ("cutover", "base", "trailers")
__all__ = ["CONFIG_SECTIONS", "ID", "RULES", "add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_range_arguments(parser)
    what = parser.add_mutually_exclusive_group()  # a range and a message together is a usage error (exit 2)
    what.add_argument(
        "--range",
        metavar="BASE..HEAD",
        help="the commits to judge (from the merge base); "
        "default: --base/--head, or the config's trailers.default_range",
    )
    parser.add_argument(
        "--cutover",
        metavar="REV",
        help="the cutover commit: its ancestors get trailers.legacy, "
        "it and its descendants the contract (default: the config's top-level cutover)",
    )
    what.add_argument(
        "--message-file",
        metavar="PATH|-",
        help="judge one message (a commit-msg hook's file, a PR body) instead of a range; - reads stdin",
    )
    parser.add_argument(
        "--preset",
        action="append",
        choices=sorted(PRESETS),
        metavar="NAME",
        help=f"use this preset instead of the configured ones (repeatable): {', '.join(PRESETS)}",
    )
    parser.add_argument(
        "--filled",
        action="store_true",
        help="reject template placeholder values such as <ROW-ID> (always on for a range)",
    )
    parser.add_argument(
        "--author",
        metavar="'NAME <EMAIL>'",
        help="the author for the dco preset in "
        "--message-file mode (default: as git finds it: $GIT_AUTHOR_NAME and $GIT_AUTHOR_EMAIL, "
        "then git var GIT_AUTHOR_IDENT, i.e. user.name and user.email)",
    )


def run(ctx: Context, args: argparse.Namespace) -> Result:
    cfg = ctx.config.trailers
    try:
        contract = compile_contract(cfg, args.preset)
        legacy = compile_contract(cfg.legacy)
    except ValueError as exc:
        raise CheckError(str(exc), hint="fix the pattern in the trailers section of .agents/config.yaml") from None
    if contract.empty:
        raise CheckError(
            "the trailer contract is empty: nothing would be checked",
            hint="set trailers.presets (row, dco, agents-protocol) or rules in .agents/config.yaml",
        )
    if args.message_file:
        return _run_message(ctx, args, contract)
    with _collector_paused():
        return _run_range(ctx, args, cfg, contract, legacy)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """A range builds a handful of objects per commit that hold no cycles and live to the end; left on,
    the cyclic collector would rescan them about a hundred times over 10,000 commits, for nothing."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _run_message(ctx: Context, args: argparse.Namespace, contract: Compiled) -> Result:
    if args.message_file == "-":
        raw, display = sys.stdin.buffer.read(), "<stdin>"
    else:
        path = Path(args.message_file)
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise CheckError(
                f"--message-file {args.message_file}: {exc.strerror}",
                hint="pass the path of a commit message file, or - for stdin",
            ) from None
        display = _display(ctx, path)
    author = args.author or (_git_author(ctx) if contract.needs_author else None)
    msg = read_message(raw.decode("utf-8", errors="surrogateescape"), "hook")
    values = [t.value for t in msg.trailers]
    facts = _facts(ctx, contract.needs_author, [author] if author else [], values, filled=args.filled)
    facts.author = facts.mailmap(author) if author else None
    hook_fix = DCO_FIX["hook"].format(author=author or "NAME <EMAIL>")
    findings = [
        f._replace(path=display, hint=hook_fix if f.hint == DCO_FIX["range"] else f.hint)
        for f in judge(msg, contract, facts)
    ]
    ok = f"OK: {display} carries the trailer contract ({_names(contract)})"
    return Result.judge(ID, findings, 1, "message", ok)


def _run_range(
    ctx: Context, args: argparse.Namespace, cfg: TrailersConfig, contract: Compiled, legacy: Compiled
) -> Result:
    # Read only what the rules use: parents for a merge policy or a cutover, authors for a sign-off rule.
    cutover = args.cutover or ctx.config.cutover
    parents = cfg.merges != "contract" or bool(cutover)
    bots = _exempt_authors(cfg.exempt_authors)
    authors = contract.needs_author or bool(cutover and legacy.needs_author) or bool(bots)
    rng, commits, messages = _read_range(ctx, args, cfg, parents=parents, authors=authors)
    if not commits:
        return _nothing_new(rng)
    legacy_shas = _legacy(ctx, args, rng, commits)
    # the values to map through .mailmap, each once: a range repeats the same few sign-offs
    values = list({t.value for m in messages for t in m.trailers}) if authors else []
    facts = _facts(ctx, authors, [], values, filled=True)
    debt = {(e.sha, e.error): e for e in cfg.exceptions}
    used: set[tuple[str, str]] = set()
    findings: list[Finding] = []
    merges_skipped = bots_skipped = judged = 0
    merge_policy = cfg.merges != "contract"
    examines_contract, examines_legacy = not contract.empty, not legacy.empty
    for c, msg in zip(commits, messages):
        if merge_policy and c.is_merge:
            if cfg.merges == "skip":
                merges_skipped += 1
                continue
            findings.append(
                R["TR010"].finding(
                    f"{c.short}: merge commit with {len(c.parent_shas)} parents (trailers.merges: forbid)",
                    hint="rebase instead of merging",
                    commit=c.sha,
                )
            )
            continue
        if bots and any(p.search(f"{c.author_name} <{c.author_email}>") for p in bots):
            bots_skipped += 1  # an exempt author (a bot): not judged, and counted in the summary
            continue
        is_legacy = bool(legacy_shas) and c.sha in legacy_shas
        rules, examines = (legacy, examines_legacy) if is_legacy else (contract, examines_contract)
        judged += examines  # a skipped merge or a legacy commit under no rule was not examined
        if authors:
            facts.author = f"{c.author_name} <{c.author_email}>"
        for f in judge(msg, rules, facts) if examines else ():
            if (c.sha, f.message) in debt:
                used.add((c.sha, f.message))
                continue
            hint = f.hint.replace("BASE", rng.merge_base[:12]) if f.hint == DCO_FIX["range"] else f.hint
            findings.append(f._replace(message=f"{c.short}: {f.message}", line=None, hint=hint, commit=c.sha))
    in_range = {c.sha for c in commits}
    for sha, error in debt:
        if sha in in_range and (sha, error) not in used:
            findings.append(
                R["TR011"].finding(
                    f"{sha[:12]}: exception no longer matches an error: {error!r}",
                    hint="remove it from trailers.exceptions in .agents/config.yaml",
                    commit=sha,
                )
            )
    details = [
        f"debt: {e.sha[:12]} {e.error} ({e.reason})" + (" [applied]" if k in used else "") for k, e in debt.items()
    ]
    if rng.base != EMPTY_TREE and ctx.git.changes(rng.base, rng.head, ".mailmap"):
        details.append(
            "this range changes .mailmap: identities were mapped through the base's .mailmap "
            f"({rng.base[:12]}); the change applies once it is on the base"
        )
    extra = [f"{len(legacy_shas)} before the cutover"] if legacy_shas else []
    extra += [f"{merges_skipped} merges skipped"] if merges_skipped else []
    extra += [f"{bots_skipped} by exempt authors (bots) skipped"] if bots_skipped else []
    extra += [f"{len(debt)} exceptions are debt"] if debt else []
    start = "the root" if rng.merge_base == EMPTY_TREE else rng.merge_base[:12]
    ok = f"OK: {len(commits)} commits in {start}..{rng.head[:12]} carry the trailer contract ({_names(contract)})" + (
        f"; {', '.join(extra)}" if extra else ""
    )
    if not findings and not judged:
        return _none_judged(rng, commits, extra, details)
    return Result.judge(ID, findings, judged if not findings else len(commits), "commits", ok, details)


def _nothing_new(rng: Range) -> Result:
    """An empty range (CI on an up-to-date main, a branch with nothing new): a pass that names what it
    judged, the base and the commit the range would start after, rather than a silent zero."""
    base = rng.ref if rng.ref != rng.base else rng.base[:12]
    if rng.source == "config cutover" or rng.source == "--cutover":
        what = f"the head is the cutover {rng.base[:12]}: nothing new since it"
    else:
        what = f"{base} is the base: nothing new since {rng.merge_base[:12]}"
    return Result(ID, Status.PASS, f"OK: {what} (0 commits to judge)", examined=0, unit="commits")


def _none_judged(rng: Range, commits: list[Commit], extra: list[str], details: list[str]) -> Result:
    """Commits in the range, none of them under a rule. Skipped merges and exempt authors (a Dependabot
    pull request) are a policy applied to each commit: a pass that says so. A range wholly before the
    cutover, with no legacy rule, had nothing judged: not a pass, and the message says why."""
    span = f"{'the root' if rng.merge_base == EMPTY_TREE else rng.merge_base[:12]}..{rng.head[:12]}"
    if any(e.endswith("before the cutover") for e in extra):
        legacy = extra[0].split()[0]
        return Result(
            ID,
            Status.ERROR,
            f"examined 0 commits: {legacy} of the {len(commits)} commits in {span} lie before the cutover "
            "(trailers.legacy sets no rule)"
            + (f", {', '.join(extra[1:])}" if extra[1:] else "")
            + ": nothing was verified",
            unit="commits",
            details=details,
            hint="judge the commits after the cutover (--range CUTOVER..HEAD), or set a trailers.legacy rule",
        )
    summary = f"OK: none of the {len(commits)} commits in {span} is under the contract: {'; '.join(extra)}"
    return Result(ID, Status.PASS, summary, examined=0, unit="commits", details=details)


def _exempt_authors(patterns: list[str]) -> list[SafePattern]:
    try:
        return [compile_pattern(p) for p in patterns]
    except ValueError as exc:
        raise CheckError(str(exc), hint="fix trailers.exempt_authors in .agents/config.yaml") from None


def _read_range(
    ctx: Context, args: argparse.Namespace, cfg: TrailersConfig, parents: bool, authors: bool
) -> tuple[Range, list[Commit], list[Message]]:
    """The range to judge (Context.range, printed once), its commits and their messages, from one git log
    that usually also finds the merge base (`parents` and `authors` say which fields to read); each message
    is read while git writes the next."""
    if args.range:
        base, sep, head = args.range.partition("..")
        if not sep or head.startswith(".") or not base:
            raise CheckError(f"--range {args.range!r} is not BASE..HEAD", hint="write --range origin/main..HEAD")
        rng = ctx.range(base, head or "HEAD", flag="--range")
    elif cfg.default_range == "base":
        rng = ctx.range(args.base, args.head)
    else:
        cutover, source = (args.cutover, "--cutover") if args.cutover else (ctx.config.cutover, "config cutover")
        try:
            rng = ctx.range(args.base, args.head, since=cutover, since_source=source)
        except NoRange:
            raise CheckError(
                "trailers.default_range is cutover but no cutover is configured",
                hint="set cutover: in .agents/config.yaml, or pass --range BASE..HEAD",
            ) from None
    # identities map through the base's .mailmap: a branch cannot map its own signer to its author
    ctx.git.mailmap_rev = rng.base
    commits, messages = rng.read(partial(read_message, mode="range"), mailmap=True, parents=parents, authors=authors)
    return rng, commits, messages


def _legacy(ctx: Context, args: argparse.Namespace, rng: Range, commits: list[Commit]) -> set[str]:
    """The commits in the range that are ancestors of the cutover; the cutover itself is judged by the
    contract (it is the first commit that carries it) unless `trailers.cutover_judged` is `legacy`."""
    cutover = args.cutover or ctx.config.cutover
    if not cutover:
        return set()
    cut = ctx.git.must_resolve(cutover, "cutover")
    parents = {c.sha: c.parent_shas for c in commits}
    itself = {cut} & parents.keys() if ctx.config.trailers.cutover_judged == "legacy" else set()
    if cut not in parents:  # the cutover is outside the range: ask git which of ours it reaches
        reach = cut if rng.merge_base == EMPTY_TREE else f"{rng.merge_base}..{cut}"
        return (set(ctx.git.rev_list(reach)) & parents.keys()) - {cut}
    seen, todo = set(), list(parents[cut] or ())
    while todo:
        sha = todo.pop()
        if sha in seen or sha not in parents:
            continue
        seen.add(sha)
        todo += parents[sha]
    return seen | itself


def _facts(ctx: Context, need_mailmap: bool, idents: list[str], values: Sequence[str], filled: bool) -> Facts:
    """The facts of a run; with `need_mailmap`, the identities and trailer values mapped through .mailmap."""
    mapped: dict[str, str] = {}
    if need_mailmap:
        mapped = ctx.git.check_mailmap(idents + list(values))
    cache: dict[str, bool] = {}

    def exists(path: str) -> bool:
        if path not in cache:
            try:  # a template that leads out of the repository names nothing in it
                cache[path] = confine(ctx.root, path).is_file()
            except OutsideRepo:
                cache[path] = False
        return cache[path]

    return Facts(mailmap=lambda ident: mapped.get(ident, ident), exists=exists, filled=filled)


def _git_author(ctx: Context) -> str | None:
    """The author of the commit being made, as git finds it: $GIT_AUTHOR_NAME and $GIT_AUTHOR_EMAIL, else
    `git var GIT_AUTHOR_IDENT` (the same variables, then user.name and user.email from the user's own
    config, which rowgate's other git calls leave out: identity does not change how anything parses)."""
    name, email = ctx.env.get("GIT_AUTHOR_NAME"), ctx.env.get("GIT_AUTHOR_EMAIL")
    if name and email:
        return f"{name} <{email}>"
    import subprocess

    try:
        proc = subprocess.run(
            ["git", "var", "GIT_AUTHOR_IDENT"],
            cwd=ctx.root,
            capture_output=True,
            env=dict(ctx.env),
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    ident = proc.stdout.decode("utf-8", errors="replace").strip()
    if proc.returncode != 0 or ">" not in ident:
        return None
    return ident[: ident.rindex(">") + 1]  # drop the timestamp and zone after `Name <email>`


def _display(ctx: Context, path: Path) -> str:
    try:
        return ctx.rel(path)
    except ValueError:
        return str(path)


def _names(contract: Compiled) -> str:
    return ", ".join(contract.names) or "configured rules"
