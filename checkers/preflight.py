"""Run checks in registry order in one process and collect one result each; nothing here prints."""
from __future__ import annotations

import argparse
import time

from checkers import registry
from checkers.context import Context
from checkers.registry import CheckSpec
from checkers.results import CheckError, Result


def check_parser(spec: CheckSpec, prog: str | None = None) -> argparse.ArgumentParser:
    module = spec.load()
    parser = argparse.ArgumentParser(prog=prog or f"rowgate check {spec.id}",
                                     description=(module.__doc__ or spec.summary).strip())
    if hasattr(module, "add_arguments"):
        module.add_arguments(parser)
    return parser


def run_check(spec: CheckSpec, ctx: Context, args: argparse.Namespace) -> Result:
    """Run one check; a CheckError is `error` (could not verify), and so is a crash, with its origin."""
    start = time.perf_counter()
    try:
        result: Result = spec.load().run(ctx, args)
    except CheckError as exc:
        result = Result.error(spec.id, str(exc), exc.hint)
    except Exception as exc:  # a crash must not read as a pass, nor hide the other gates
        import os
        import traceback

        if os.environ.get("ROWGATE_DEBUG"):
            raise  # only on a crash: it is not cheap to import

        where = traceback.extract_tb(exc.__traceback__)[-1]
        result = Result.error(spec.id, f"internal error: {type(exc).__name__}: {exc} "
                              f"({where.filename}:{where.lineno})", hint="please report this")
    result.duration_s = time.perf_counter() - start
    return result


def run_preflight(ctx: Context, only: list[str] | None = None, base: str | None = None) -> list[Result]:
    results = []
    for spec in registry.CHECKS:
        if only and spec.id not in only:
            continue
        args = check_parser(spec).parse_args([])
        if base is not None and hasattr(args, "base"):
            args.base = base
        results.append(run_check(spec, ctx, args))
    return results
