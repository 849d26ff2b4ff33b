"""Run checks in registry order in one process and collect one result each; nothing here prints.

What runs is the config's to say: a check with `checks.<id>.enabled: false` is not run (the preflight
names it and why), a check that needs records skips where the repository has none, and with no config
file at all a check that has nothing to work on skips with the reason. Findings of rules the config
ignores (`ignore`, `per_file_ignores`) are dropped from the result, which says how many were.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from . import registry
from .context import Context
from .registry import CheckSpec
from .results import CheckError, Finding, Result, Status

# The config sections every check run reads besides its own (what runs, what is ignored).
CONTROL_SECTIONS = ("checks", "ignore", "per_file_ignores")
NOT_CONFIGURED = "not configured here (`rowgate init`)"


def check_parser(spec: CheckSpec, prog: str | None = None) -> argparse.ArgumentParser:
    module = spec.load()
    parser = argparse.ArgumentParser(
        prog=prog or f"rowgate check {spec.id}",
        description=(module.__doc__ or spec.summary).strip(),
        formatter_class=HelpFormatter,
    )
    if hasattr(module, "add_arguments"):
        module.add_arguments(parser)
    return parser


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter at the width shutil.get_terminal_size() gives, found without importing shutil
    (and the compression modules it loads): argparse makes one for every add_argument, so each check run
    would pay that import for a help text it does not print."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None):
        super().__init__(prog, indent_increment, max_help_position, terminal_width() - 2 if width is None else width)


def terminal_width() -> int:
    """$COLUMNS, else the terminal's width, else 80 (shutil.get_terminal_size's order)."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80 if sys.__stdout__ else 80
    except (AttributeError, ValueError, OSError):
        return 80


def run_check(spec: CheckSpec, ctx: Context, args: argparse.Namespace) -> Result:
    """Run one check; a CheckError is `error` (could not verify), and so is a crash, with its origin.
    A disabled check, or one with nothing configured to work on, is a `skip` with the reason."""
    from .safe_regex import start_run

    start = time.perf_counter()
    start_run()  # the configured patterns' time budget is per check run
    reason = disabled(spec, ctx) or not_configured(spec, ctx, args)
    if reason:
        result = Result.skip(spec.id, reason)
    else:
        try:
            result = suppress(spec.load().run(ctx, args), ctx)
        except CheckError as exc:
            result = Result.error(spec.id, str(exc), exc.hint)
        except Exception as exc:  # a crash must not read as a pass, nor hide the other gates
            import traceback  # only on a crash: it is not cheap to import

            if os.environ.get("ROWGATE_DEBUG"):
                raise

            where = traceback.extract_tb(exc.__traceback__)[-1]
            result = Result.error(
                spec.id,
                f"internal error: {type(exc).__name__}: {exc} ({where.filename}:{where.lineno})",
                hint="please report this",
            )
    result.duration_s = time.perf_counter() - start
    return result


def run_preflight(
    ctx: Context, only: list[str] | None = None, base: str | None = None, not_run: list[tuple[str, str]] | None = None
) -> list[Result]:
    """Every enabled check in registry order; the disabled ones go to `not_run` as (id, why)."""
    results = []
    for spec in registry.CHECKS:
        if only and spec.id not in only or not spec.preflight:
            continue
        reason = disabled(spec, ctx)
        if reason:
            if not_run is not None:
                not_run.append((spec.id, reason))
            continue
        args = check_parser(spec).parse_args([])
        if base is not None and hasattr(args, "base"):
            args.base = base
        why = _not_run_here(spec, ctx, args)
        if why:  # the check's inputs are made elsewhere (a build): named as not run, not a skip
            if not_run is not None:
                not_run.append((spec.id, why))
            continue
        results.append(run_check(spec, ctx, args))
    return results


def _not_run_here(spec: CheckSpec, ctx: Context, args: argparse.Namespace) -> str | None:
    """A check whose inputs another job makes (gencode audits a build) says, through its module's
    `not_run(ctx, args)`, when there is nothing of them here; its own errors still come from running it."""
    hook = getattr(spec.load(), "not_run", None)
    try:
        return hook(ctx, args) if hook is not None else None
    except Exception:  # noqa: BLE001 -- a broken config or table: run the check, which reports it
        return None


def disabled(spec: CheckSpec, ctx: Context) -> str | None:
    control = getattr(ctx.config, "checks", {})
    entry = control.get(spec.id) if isinstance(control, dict) else getattr(control, spec.id, None)
    if entry is not None and not entry.enabled:
        where = ctx.source.display if ctx.source is not None else "the config"
        return f"disabled in {where} (checks.{spec.id}.enabled: false)"
    return None


def not_configured(spec: CheckSpec, ctx: Context, args: argparse.Namespace) -> str | None:
    """Why a check has nothing to work on here, or None. A check that needs records skips where the
    repository has none; with no config file, the checks whose inputs are specific to a code base skip
    unless those inputs are there."""
    if spec.records and not has_records(ctx.root) and not _record_tables(ctx):
        return f"{NOT_CONFIGURED}: no records in .agents/rows/"
    if ctx.source is None or ctx.source.path is not None:
        return None  # a config file says what to run: a missing input is the check's own error
    if spec.id == "commit-trailers" and not getattr(args, "preset", None):
        return f"{NOT_CONFIGURED}: no trailer contract; pass --preset dco (or row, agents-protocol)"
    if spec.id == "env-doc":
        cfg = ctx.config.env_doc
        if not (ctx.root / cfg.doc).is_file() and not (ctx.root / cfg.allowlist).is_file():
            return f"{NOT_CONFIGURED}: no env doc ({cfg.doc}) or allowlist ({cfg.allowlist})"
    if spec.id == "gemv-invocation":
        return f"{NOT_CONFIGURED}: the matmul call sites to audit are named in the config"
    if spec.id == "gencode" and not (ctx.root / ctx.config.gencode.table).is_file():
        return f"{NOT_CONFIGURED}: no arch feature table ({ctx.config.gencode.table})"
    return None


def _record_tables(ctx: Context) -> bool:
    sources = getattr(ctx.config, "sources", None)
    return sources is not None and bool(sources.rows.tables)


def has_records(root: Path) -> bool:
    rows = root / ".agents" / "rows"
    return rows.is_dir() and any(rows.glob("*.yaml"))


def suppress(result: Result, ctx: Context) -> Result:
    """Drop the findings of rules the config ignores, everywhere (`ignore`) or under a glob
    (`per_file_ignores`); a failure left with no findings passes, saying how many were ignored."""
    everywhere = set(getattr(ctx.config, "ignore", None) or ())
    per_file = getattr(ctx.config, "per_file_ignores", None) or {}
    per_file = per_file if isinstance(per_file, dict) else vars(per_file)
    if not result.findings or not (everywhere or per_file):
        return result
    from .globmatch import GlobSet  # only where something is ignored

    globs = [(GlobSet([g]), set(keys)) for g, keys in per_file.items()]

    def ignored(f: Finding) -> bool:
        names = {f.rule, f.name}
        if names & everywhere:
            return True
        return f.path is not None and any(names & keys and glob.matches(f.path) for glob, keys in globs)

    kept = [f for f in result.findings if not ignored(f)]
    dropped = len(result.findings) - len(kept)
    if not dropped:
        return result
    where = ctx.source.display if ctx.source is not None else "the config"
    note = f"{dropped} finding{'s' if dropped != 1 else ''} ignored by {where}"
    result.findings = kept
    if kept:
        result.summary = (
            f"{len(kept)} finding{'s' if len(kept) != 1 else ''} in {result.examined} {result.unit} ({note})"
        )
    elif result.status == Status.FAIL:
        result.status = Status.PASS
        result.summary = f"OK: {result.check}: {result.examined} {result.unit} examined; {note}"
    return result
