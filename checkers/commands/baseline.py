"""`rowgate preflight --baseline [REF]`: the preflight on the merge base and on the head, compared."""

from __future__ import annotations

import argparse
import sys

from .. import registry
from ..baseline import run_baseline
from ..baseline_output import render_baseline
from ..context import Context
from ..results import EXIT_USAGE


def run_baseline_command(ctx: Context, args: argparse.Namespace) -> int:
    if args.format not in ("text", "json", "sarif"):
        print(f"rowgate: --baseline writes text, json or sarif, not {args.format}", file=sys.stderr)
        return EXIT_USAGE
    if args.base and args.baseline:
        print("rowgate: give the base once: --baseline REF or --base REF", file=sys.stderr)
        return EXIT_USAGE
    report = run_baseline(ctx, args.baseline or args.base or None, args.only)
    anchors = None
    if args.format == "sarif":
        from ..baseline_output import sarif_results
        from ..sarif_anchors import for_results

        anchors = for_results(ctx, "sarif", sarif_results(report)[0])
    sys.stdout.write(render_baseline(args.format, report, registry.all_rules(), args.fail_on_inherited, anchors))
    return report.exit_code(args.fail_on_inherited)
