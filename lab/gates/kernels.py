"""Kernel numerics gate: every case of lab/gates/cases on the GPU against its torch reference, one table, a ledger record.

`python -m lab gate kernels [--ledger PATH]` (or `python -m lab.gates.kernels`). Exit 0 when the
comparator self-test passes and every case is within its tolerance, 1 otherwise (no GPU included:
a gate that ran nothing has not passed), 2 on usage errors.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import torch

from lab.gates import numerics
from lab.gates.cases import KernelCase, discover
from lab.gates.ledger import figure, write_record


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cases = select(discover(), args.filter, args.skip_long, args.tag)
    if args.list:
        for c in cases:
            print(f"{c.name}  arm={c.arm} flag={c.flag} tol={c.tolerance} row={c.row}")
        return 0
    problems = numerics.self_test()
    print(f"comparator self-test: {'ok' if not problems else 'FAILED'}")
    for p in problems:
        print(f"  {p}")
    if not torch.cuda.is_available():
        print("no CUDA device: the kernel cases did not run, so the gate has not passed", file=sys.stderr)
        return 1
    device = torch.device("cuda")
    rows = [run_case(c, device, args.seed) for c in cases]
    print_table(rows)
    failed = [r for r in rows if r["verdict"] != "pass"]
    summary = (
        f"{len(rows) - len(failed)}/{len(rows)} cases within tolerance; self-test {'ok' if not problems else 'failed'}"
    )
    print(summary)
    if args.ledger:
        write_ledger(args.ledger, cases, rows, problems, summary, device, argv, args.sha, args.allow_dirty)
        print(f"ledger: {args.ledger}")
    return 0 if rows and not failed and not problems else 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m lab gate kernels", description=__doc__.splitlines()[0])
    p.add_argument("--ledger", type=Path, help="write the ledger record (JSON) to this path")
    p.add_argument(
        "--allow-dirty",
        action="store_true",
        help="write the ledger record from a tree that differs from HEAD (recorded)",
    )
    p.add_argument("--filter", action="append", default=[], help="run cases whose name contains this (repeatable)")
    p.add_argument("--tag", help="run only cases with this tag (small, long)")
    p.add_argument("--skip-long", action="store_true", help="leave out the long-context cases")
    p.add_argument("--seed", type=int, default=0, help="input seed (default 0)")
    p.add_argument("--list", action="store_true", help="list the selected cases and exit")
    p.add_argument("--sha", help="commit the record is for (default: git HEAD of this checkout)")
    return p


def select(cases: list[KernelCase], filters: list[str], skip_long: bool, tag: str | None) -> list[KernelCase]:
    out = [c for c in cases if not filters or any(f in c.name for f in filters)]
    if skip_long:
        out = [c for c in out if "long" not in c.tags]
    if tag:
        out = [c for c in out if tag in c.tags]
    return out


def run_case(case: KernelCase, device: torch.device, seed: int) -> dict:
    """One case: make inputs, run kernel and reference, compare; an exception is a failed case, not a crash."""
    t0 = time.perf_counter()
    row: dict[str, Any] = {
        "name": case.name,
        "arm": case.arm,
        "flag": case.flag,
        "dtype": str(case.dtype).removeprefix("torch."),
        "tolerance": case.tolerance,
        "row": case.row,
    }
    try:
        inputs = case.make(seed, device)
        out = case.kernel(inputs)
        ref = case.reference_output(inputs)
        torch.cuda.synchronize(device)
        cmp = numerics.compare(out, ref, numerics.TOLERANCES[case.tolerance])
        row.update(cmp.as_dict())
        row["verdict"] = "pass" if cmp.passed else "fail"
    except Exception as exc:  # a kernel error must show as this case's failure, the others still run
        row.update(verdict="error", error=f"{type(exc).__name__}: {exc}")
    row["seconds"] = round(time.perf_counter() - t0, 3)
    return row


def print_table(rows: list[dict]) -> None:
    print(f"{'case':<58} {'bitwise%':>9} {'max_abs':>10} {'max_rel':>10}  verdict")
    for r in rows:
        if "numel" in r:
            print(
                f"{r['name']:<58} {r['bitwise_equal_pct']:>9.2f} {r['max_abs']:>10.3e} {r['max_rel']:>10.3e}  "
                f"{r['verdict']}"
            )
        else:
            print(f"{r['name']:<58} {'-':>9} {'-':>10} {'-':>10}  {r['verdict']}: {r.get('error', '')}")


def arm_summary(rows: list[dict]) -> dict[str, dict]:
    """Per arm and dtype: cases, failures, the worst max_abs and the lowest bitwise-equal %."""
    out: dict[str, dict] = {}
    for r in rows:
        s = out.setdefault(
            f"{r['arm']}/{r['dtype']}", {"cases": 0, "failed": 0, "max_abs": 0.0, "min_bitwise_equal_pct": 100.0}
        )
        s["cases"] += 1
        s["failed"] += r["verdict"] != "pass"
        if "numel" in r:
            s["max_abs"] = max(s["max_abs"], r["max_abs"])
            s["min_bitwise_equal_pct"] = min(s["min_bitwise_equal_pct"], r["bitwise_equal_pct"])
    return out


def write_ledger(
    path: Path,
    cases: list[KernelCase],
    rows: list[dict],
    problems: list[str],
    summary: str,
    device: torch.device,
    argv: list[str] | None,
    sha: str | None,
    allow_dirty: bool = False,
) -> Path:
    """The gate's schema-2 record at `path`, with its comparator self-test (seeded, caught) and its figures."""
    caught = numerics.SELF_TEST_SEEDED - sum("1-ULP change" in p for p in problems)
    passed = sum(r["verdict"] == "pass" for r in rows)
    return write_record(
        path.parent,
        path.stem,
        sorted({c.row for c in cases}),
        "python -m lab gate kernels " + shlex.join(sys.argv[1:] if argv is None else argv),
        str(device),
        summary,
        {"self_test": problems or "ok", "sha_given": sha, "arms": arm_summary(rows), "cases": rows},
        figures=[figure("cases", len(rows), "count"), figure("cases_within_tolerance", passed, "count")],
        selftest=(numerics.SELF_TEST_SEEDED, caught),
        allow_dirty=allow_dirty,
        at=path,
    )


if __name__ == "__main__":
    sys.exit(main())
