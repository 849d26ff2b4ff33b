"""`rowgate trailers --parse [--no-divider]`: print a message's trailers exactly as git does."""

from __future__ import annotations

import argparse
import sys

from ..results import EXIT_PASS, EXIT_USAGE
from ..trailers.parser import MODELLED_GIT, parse


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    p = sub.add_parser(
        name,
        help="parse a commit message's trailers from stdin, exactly as git does",
        description="Read a commit message on stdin and print its trailers exactly as "
        "`git interpret-trailers --parse [--no-divider]` prints them (with no git "
        f"config in effect), using rowgate's own parser; it models git {MODELLED_GIT} "
        "and later.",
    )
    p.add_argument(
        "--parse",
        action="store_true",
        required=True,
        help="print the trailers, one `Key: value` line each, continuation lines unfolded",
    )
    p.add_argument(
        "--no-divider",
        action="store_true",
        help="do not treat a `---` line as the start of a patch (what git log sees)",
    )
    p.add_argument(
        "--no-final-newline",
        action="store_true",
        help=f"model git before {MODELLED_GIT}, which does not append a newline to input lacking one "
        "(so a `---` or `Conflicts:` on the last line does not count)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.parse:
        return EXIT_USAGE
    text = sys.stdin.buffer.read().decode("utf-8", errors="surrogateescape")
    block = parse(text, "range" if args.no_divider else "hook", final_newline=not args.no_final_newline)
    sys.stdout.buffer.write(block.render().encode("utf-8", errors="surrogateescape"))
    sys.stdout.flush()
    return EXIT_PASS
