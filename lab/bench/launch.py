"""Run one arm (or peer) of a benchmark workload a few times and nothing else, for an external profiler.

`ncu` or `nsys` wrapped around this command sees the workload's kernels on the same inputs the
benchmarks use. On a GPU the last call runs inside the NVTX range `profile`, so a profiler can take exactly
that call's kernels (after the warm-up calls, outside the setup a peer's prepare() launches); or skip the
first launches with the profiler's own options. The last line names the workload, arm and shape that ran
(`python -m lab bench ncu_table` labels each kernel with it).

    ncu --nvtx --nvtx-include "profile/" python -m lab bench launch --workload attn-decode --arm tiled --calls 2
    ncu -k regex:tiled -s 2 -c 2 python -m lab bench launch --workload attn-decode --arm tiled
"""

from __future__ import annotations

import argparse
import sys

import torch

from engine.flags import FlagSnapshot
from lab.bench.workloads import DTYPES, WORKLOADS, parse_shape

NVTX_RANGE = "profile"  # the last call's range: `ncu --nvtx --nvtx-include "profile/"`


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m lab bench launch", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="attn-decode")
    p.add_argument("--arm", required=True, help="one of the workload's arms or peers")
    p.add_argument("--shape", help="KEY=INT,... over the workload's defaults")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    p.add_argument("--calls", type=int, default=4, help="how many times to run it (default 4)")
    p.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda when available")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    work = WORKLOADS[args.workload]
    names = sorted({*work.arm_names, *work.peers})
    if args.arm not in names:
        print(
            f"error: --arm {args.arm!r} is not an arm or peer of {work.name} (known: {', '.join(names)})",
            file=sys.stderr,
        )
        return 2
    if args.calls < 1:
        print(f"error: --calls {args.calls}: expected at least 1", file=sys.stderr)
        return 2
    try:
        shape = parse_shape(args.shape, work.defaults)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    inputs = work.make(shape, device, DTYPES[args.dtype], 0)
    if args.arm in work.peers:
        prepare, fn = work.peers[args.arm]
        inputs = prepare(*inputs)
    else:
        fn = work.arm(args.arm, FlagSnapshot.from_env())
    for _ in range(args.calls - 1):
        out = fn(*inputs)
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # the warm-up's kernels end before the range opens
        torch.cuda.nvtx.range_push(NVTX_RANGE)
        out = fn(*inputs)
        torch.cuda.synchronize(device)
        torch.cuda.nvtx.range_pop()
    else:
        out = fn(*inputs)
    text = ",".join(f"{k}={v}" for k, v in shape.items())
    print(f"launch: {work.name} {args.arm} {text} x{args.calls} on {device}: output {tuple(out.shape)} {out.dtype}")
    return 0
