"""`bench-checkers.py trailers-oracle --repo PATH [--rev REV]`: hold the trailer parser to git over a whole history.

One `git log` reads every commit's raw message (%B) and git's own parse of it (%(trailers:only,unfold)); the
parser's range mode must print the same for each. With `--hook` each message is also given to `git interpret-
trailers --parse` (one process per message, so only for a sample: `--hook-sample N`), in the modelled git's
behaviour (a missing final newline appended, as git 2.46.2+ does). Prints the counts and the first mismatches.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared bench helpers beside this file

from _measure import Progress, phase  # noqa: E402

from checkers.trailers.parser import commit_trailers, parse  # noqa: E402

ENV = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C"}


def log_records(repo: str, rev: str) -> list[tuple[str, str, str]]:
    out = subprocess.run(
        ["git", "-C", repo, "log", "-z", "--format=%H%x1f%B%x1f%(trailers:only,unfold)", rev, "--"],
        capture_output=True,
        check=True,
        env=ENV,
        timeout=3600,
    ).stdout
    records = []
    for rec in out.decode("utf-8", "surrogateescape").split("\0"):
        if rec:
            sha, message, trailers = rec.split("\x1f", 2)
            records.append((sha.strip(), message, trailers))
    return records


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="bench-checkers.py trailers-oracle", description=__doc__)
    ap.add_argument("--repo", required=True, help="a clone with the history to read")
    ap.add_argument("--rev", default="HEAD", help="the history: every commit reachable from REV")
    ap.add_argument(
        "--hook-sample",
        type=int,
        default=0,
        metavar="N",
        help="also compare hook mode with git interpret-trailers on N messages picked at random",
    )
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    records = phase(f"reading every commit of {args.rev} in {args.repo}", lambda: log_records(args.repo, args.rev))
    t_log = time.perf_counter() - t0
    t0 = time.perf_counter()
    mismatches = [
        (sha, ours, theirs) for sha, msg, theirs in records if (ours := commit_trailers(msg).render()) != theirs
    ]
    t_parse = time.perf_counter() - t0
    with_trailers = sum(1 for _, _, theirs in records if theirs)
    print(
        f"range mode: {len(records)} commits, {with_trailers} with trailers, {len(mismatches)} mismatches "
        f"(git log {t_log:.2f} s, parser {t_parse:.2f} s)"
    )
    for sha, ours, theirs in mismatches[:5]:
        print(f"  {sha}: ours {ours!r} git {theirs!r}")
    bad = len(mismatches)
    if args.hook_sample:
        sample = random.Random(2026).sample(records, min(args.hook_sample, len(records)))
        hook_bad = 0
        progress = Progress(len(sample), "interpret-trailers", every_s=2.0)  # one git per message: a line per 2 s
        for sha, msg, _ in sample:
            started = time.perf_counter()
            fed = msg + "\n" if msg and not msg.endswith("\n") else msg  # git 2.46.2+ appends it itself
            for mode, flag in (("hook", []), ("range", ["--no-divider"])):
                git = subprocess.run(
                    ["git", "interpret-trailers", "--parse", *flag],
                    input=fed.encode("utf-8", "surrogateescape"),
                    capture_output=True,
                    env=ENV,
                    timeout=30,
                    check=True,
                ).stdout.decode("utf-8", "surrogateescape")
                if parse(msg, mode).render() != git:  # type: ignore[arg-type]
                    hook_bad += 1
                    print(f"  {sha} ({mode}): ours {parse(msg, mode).render()!r} git {git!r}")  # type: ignore[arg-type]
            progress.step(sha[:12], time.perf_counter() - started)
        print(f"interpret-trailers: {len(sample)} messages x 2 modes, {hook_bad} mismatches")
        bad += hook_bad
    return 1 if bad else 0
