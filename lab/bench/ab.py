"""Same-binary A/B: one process, one flag toggled between two arms (two flag snapshots), arms interleaved, repetition 0
dropped, medians with min-max bands, per-pair ratios, and a verdict that needs non-overlapping bands
and no reversed pair to call a win.

    python -m lab bench ab --flag VT_ATTN_TILED [--shape batch=64,ctx=4096] [--reps 12]
    python -m lab bench ab --arm paged_decode_attention/warp_d128 [--shape ...]

`--arm OP/ARM` measures a kernel-table arm outside the default order (a by-name arm, docs/BENCHMARKS.md "Arm
outcomes"): "off" is the default order, "on" the same flags with the arm named (`engine.kernels.naming`).

On CUDA each arm is timed by replaying one captured CUDA graph over a cycle of rotating input sets
(`--timing graph`, the default; see lab/bench/timing.py); an arm that refuses capture is timed in an
eager loop and the report and the record say so.

When no arm of the flag ran on either side the A/B is "not measured" and exits 1, naming why each of its arms
declined (a shape it does not support, or past the range its A/B won: `Arm.takes`).
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

import torch

from engine import flags, kernels
from engine.flags import FlagSnapshot
from lab.bench.stats import ab_verdict, drop_warmup
from lab.bench.timing import MODES, arm_timer, clocks, describe, device_name, gpu_device, sets_for
from lab.bench.workloads import DTYPES, WORKLOADS, for_arm, for_flag, parse_shape
from lab.gates.ledger import figure, write_record


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m lab bench ab", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--flag", help="the VT_* flag whose OFF and ON arms are compared")
    what.add_argument("--arm", metavar="OP/ARM", help="a kernel-table arm run by name, against the default order")
    p.add_argument("--workload", choices=sorted(WORKLOADS), help="default: the workload that measures --flag/--arm")
    p.add_argument("--shape", help="KEY=INT,... over the workload's defaults")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    p.add_argument("--reps", type=int, default=12, help="repetitions per arm, the first dropped (default 12)")
    p.add_argument(
        "--inner",
        type=int,
        default=0,
        help="calls per eager timing sample (default: 20 on GPU, 1 on CPU); graph samples replay whole "
        "cycles of the input sets",
    )
    p.add_argument(
        "--timing",
        choices=MODES,
        default="graph",
        help="graph: replay one captured CUDA graph per arm, eager where capture fails (default); "
        "eager: back-to-back Python calls between events. Graphs need CUDA: the CPU is always eager",
    )
    p.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda when available")
    p.add_argument("--ledger", type=Path, metavar="DIR", help="write the ledger record into DIR (e.g. .agents/ledger)")
    p.add_argument(
        "--allow-dirty",
        action="store_true",
        help="write the ledger record from a tree that differs from HEAD (recorded as dirty)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.flag is not None and (args.flag not in flags.FLAGS or not flags.FLAGS[args.flag].is_bool):
        print(f"error: {args.flag} is not a boolean flag declared in engine/flags.py", file=sys.stderr)
        return 2
    named = None
    if args.arm is not None:
        op, _, arm = args.arm.partition("/")
        try:
            kernels.naming(FlagSnapshot.defaults(), op, arm)  # the table names what it does not know
        except KeyError as exc:
            print(f"error: --arm {args.arm}: {exc.args[0]}", file=sys.stderr)
            return 2
        named = (op, arm)
    if args.reps < 3:
        print("error: --reps must be at least 3 (the first is dropped; a verdict needs pairs)", file=sys.stderr)
        return 2
    try:
        work = WORKLOADS[args.workload] if args.workload else for_arm(*named) if named else for_flag(args.flag)
        shape = parse_shape(args.shape, work.defaults)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    where = gpu_device(args.device, "bench ab", "the torch references: a flag that gates a CUDA arm runs none there")
    if where is None:
        return 2
    device = torch.device(where)
    dtype = DTYPES[args.dtype]
    inner = args.inner or (20 if device.type == "cuda" else 1)
    record = run_ab(work, shape, args.flag, device, dtype, args.reps, inner, args.timing, arm=named)
    unreached = not any(record["flag_arm_calls"].values())
    if unreached:  # both sides ran the same code: whatever the timing says, the flag was not measured
        record["verdict"] = f"not measured: the arms {record['subject']} gates ran on neither side"
        record["declined"] = declines(args.flag) if args.flag else []
    print_report(record)
    if args.ledger:
        path = write_ledger(record, args.ledger, argv, args.allow_dirty)
        print(f"ledger: {path}")
    if unreached:
        print(
            f"error: the arms {record['subject']} gates ran 0 times on both sides: the A/B compared the same code "
            "(on a GPU, with a --workload that reaches them)",
            file=sys.stderr,
        )
        for why in record["declined"]:
            print(f"  declined: {why}", file=sys.stderr)
        return 1
    return 0


def declines(flag: str) -> list[str]:
    """Why the arms `flag` gates declined the calls counted so far: `op/arm: reason` (the table's counters; a
    shape outside what an arm supports, or past the range its A/B won)."""
    gated = {(op.name, a.name) for op in kernels.TABLE.values() for a in op.arms if flag in a.flags}
    seen = kernels.counts()
    return sorted({f"{op}/{arm}: {why}" for op, arm, why in (*seen.fallbacks, *seen.declines) if (op, arm) in gated})


def run_ab(
    work,
    shape,
    flag: str | None,
    device: torch.device,
    dtype: torch.dtype,
    reps: int,
    inner: int,
    timing: str = "graph",
    base: FlagSnapshot | None = None,
    arm: tuple[str, str] | None = None,
) -> dict:
    """Both arms are `base` (default: the environment, read once) with `flag` off and on; or, with `arm` (an op and
    one of its arms, run by name), `base` as it is (the default order) and `base` naming that arm."""
    base = FlagSnapshot.from_env() if base is None else base
    n_sets = sets_for(work.bytes_moved(shape, dtype)) if device.type == "cuda" else 2
    sets = [work.make(shape, device, dtype, seed) for seed in range(n_sets)]
    if arm is not None:
        subject = "/".join(arm)
        snaps = {"off": base, "on": kernels.naming(base, *arm)}

        def ran() -> int:
            return kernels.COUNTS.ran[arm]
    elif flag is not None:
        subject = flag
        snaps = {"off": base.with_(**{flag: False}), "on": base.with_(**{flag: True})}

        def ran() -> int:
            return kernels.arms_ran(flag)
    else:
        raise ValueError("run_ab: give a flag or an arm")
    arms = {name: partial(work.run, snap) for name, snap in snaps.items()}
    outs, flag_calls = {}, {}
    for name, run in arms.items():  # warm both arms and keep one output each for the correctness note
        if work.reset is not None:  # both from the same state (a recurrent model's step advances it)
            work.reset(*sets[0])
        calls = ran()
        outs[name] = run(*sets[0])
        flag_calls[name] = ran() - calls  # the table's counters: did the flag's (the named) arm run?
    max_abs = float((outs["on"].float() - outs["off"].float()).abs().max())
    tokens = changed_tokens(outs["on"], outs["off"])
    timers = {}
    for name, run in arms.items():  # each arm's graph is captured with its snapshot; replay needs none
        timers[name] = arm_timer(run, sets, device, timing, inner)
    before = clocks()
    samples: dict[str, list[float]] = {"off": [], "on": []}
    for rep in range(reps):
        order = ("off", "on") if rep % 2 == 0 else ("on", "off")  # alternate who goes first
        for name in order:
            samples[name].append(timers[name].sample(rep))
    verdict = ab_verdict(drop_warmup(samples["off"]), drop_warmup(samples["on"]))
    return {
        "flag": flag,
        "arm": subject if arm is not None else None,
        "subject": subject,
        "workload": work.name,
        "shape": shape,
        "dtype": str(dtype).removeprefix("torch."),
        "device": device_name(device),
        "reps": reps,
        "inner": inner,
        "input_sets": n_sets,
        "timing": {name: t.as_record() for name, t in timers.items()},
        "clocks_before": before,
        "clocks_after": clocks(),
        "samples_s": samples,
        "max_abs_on_vs_off": max_abs,
        **({"tokens_differing": tokens[0], "tokens": tokens[1]} if tokens else {}),
        "flag_arm_calls": flag_calls,  # calls of the arms `flag` gates in each arm's first (eager) call
        "off": vars(verdict.base),
        "on": vars(verdict.test),
        "pair_ratios_off_over_on": verdict.ratios,
        "median_ratio": verdict.median_ratio,
        "verdict": verdict.label,
    }


def changed_tokens(on: torch.Tensor, off: torch.Tensor) -> tuple[int, int] | None:
    """How many of a step's sampled token ids differ between the arms, of how many; None for a tensor of values,
    whose difference is a magnitude (a step's output is ids: a changed token is a count, not a size)."""
    if on.is_floating_point():
        return None
    return int((on != off).sum()), on.numel()


def print_report(r: dict) -> None:
    print(
        f"A/B {r['subject']} on {r['workload']} {r['shape']} {r['dtype']} ({r['device']}, "
        f"{r['reps']} reps, first dropped, {r['input_sets']} input sets)"
    )
    print(f"{'arm':<5} {'median ms':>10} {'min ms':>10} {'max ms':>10}  timing")
    for arm in ("off", "on"):
        b = r[arm]
        print(
            f"{arm:<5} {b['median'] * 1e3:>10.4f} {b['low'] * 1e3:>10.4f} {b['high'] * 1e3:>10.4f}  "
            f"{describe(r['timing'][arm])}"
        )
    ratios = " ".join(f"{x:.3f}" for x in r["pair_ratios_off_over_on"])
    print(f"pair ratios off/on: {ratios}")
    if "tokens" in r:
        print(f"tokens that differ on vs off: {r['tokens_differing']} of {r['tokens']}")
    else:
        print(f"max |on - off| = {r['max_abs_on_vs_off']:.3g}")
    calls = r["flag_arm_calls"]
    what = f"the named arm {r['arm']}" if r.get("arm") else f"arms gated by {r['flag']}"
    print(f"{what}: on {calls['on']}, off {calls['off']} calls (each arm's first call)")
    print(f"verdict: {r['verdict']} (median ratio off/on {r['median_ratio']:.3f})")


def write_ledger(r: dict, target: Path, argv: list[str] | None, allow_dirty: bool = False) -> Path:
    command = "python -m lab bench ab " + " ".join(argv if argv is not None else sys.argv[1:])
    summary = f"{r['subject']} on {r['workload']}: {r['verdict']}, off/on median ratio {r['median_ratio']:.3f}"
    rows = [flags.FLAGS[r["flag"]].gates, "ENGINE-BENCH"] if r["flag"] else ["ENGINE-BENCH"]
    return write_record(
        target,
        f"ab-{r['subject'].lower().replace('_', '-').replace('/', '-')}",
        rows,
        command,
        r["device"],
        summary,
        r,
        kind="bench",
        figures=[figure("median_ratio", r["median_ratio"], "x")],
        allow_dirty=allow_dirty,
    )
