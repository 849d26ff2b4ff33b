"""The lab's command line: `gate <name>`, `bench <name>`, `report <name>` and `ci [PHASE ...]`; exit 0 pass, 1 fail,
2 usage."""

from __future__ import annotations

import argparse
import importlib
import sys

from lab.gates.cli import add_gate_parser

REPORTS = ("perf",)
BENCHES = (
    "ab",
    "bandwidth",
    "decode",
    "gemm_lt",
    "gemm_small",
    "launch",
    "ncu_sass",
    "ncu_table",
    "persistent_layer",
    "serving",
    "splits",
    "step_arms",
    "throughput",
    "tp_scaling",
)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    # kernels and bench hand their whole argument list (--help included) to the module they load
    if len(argv) >= 2 and argv[0] == "gate" and argv[1] in ("kernels", "reach", "spread", "teeth"):
        return run_module(f"lab.gates.{argv[1]}", argv[2:])
    if argv[:1] == ["ci"]:  # the GPU job's phase table hands its whole argument list to lab.ci
        return run_module("lab.ci", argv[1:])
    if argv[:1] == ["bench"] or argv[:2] == ["gate", "bench"]:
        rest = argv[1:] if argv[0] == "bench" else argv[2:]
        if not rest or rest[0] not in BENCHES:
            parser.parse_args(["bench", "--help"] if not rest or rest[0] in ("-h", "--help") else ["bench", *rest])
            return 2
        return run_module(f"lab.bench.{rest[0]}", rest[1:])
    if argv[:1] == ["report"]:
        rest = argv[1:]
        if not rest or rest[0] not in REPORTS:
            parser.parse_args(["report", *rest] if rest and rest[0] in ("-h", "--help") else ["report", "--help"])
            return 2
        return run_module(f"lab.report.{rest[0]}", rest[1:])
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(args.handler(args))
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m lab", description="The reference engine's gates and benchmarks (its proving ground)."
    )
    sub = parser.add_subparsers(dest="command")
    add_gate_parser(sub)
    bench = sub.add_parser(
        "bench",
        help="benchmarks: " + ", ".join(BENCHES),
        description="Run a benchmark module's main(argv): python -m lab bench NAME [ARGS]",
    )
    bench.add_argument("name", choices=BENCHES)
    report = sub.add_parser(
        "report",
        help="reports from ledger records: " + ", ".join(REPORTS),
        description="Run a report module's main(argv): python -m lab report NAME [ARGS]",
    )
    report.add_argument("name", choices=REPORTS)
    sub.add_parser("ci", help="the GPU job: phases of steps judged by what they write (lab.ci; its own --help)")
    return parser


def run_module(name: str, argv: list[str]) -> int:
    """Import an optional module lazily and hand it argv; a missing module is a clear error."""
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            print(f"error: {name} is not available in this installation ({exc})", file=sys.stderr)
            return 2
        raise
    return int(module.main(argv) or 0)
