"""`python -m lab.persistent [--seeds 20] [--batch 1,8] [--sms 16]`: run the persistent layer's schedule in that many
random interleavings per case and compare each bitwise with the engine's own layer (fp32, CPU); then drop one
counter wait (o_proj's wait on attention) and show that the static check and the interleavings catch it. Exit 0
when every interleaving is equal and the seeded bug is caught, 1 otherwise."""

from __future__ import annotations

import argparse
from dataclasses import replace

import torch

from engine.cuda.persistent_schedule import Kind, Schedule, build, build_step, check
from lab.persistent import case as C
from lab.persistent.sim import ReadBeforeWrite, simulate

TILES = dict(qkv_cols=32, o_cols=32, gu_cols=64, down_cols=48, key_splits=5)
LENS = {1: [37], 8: [37, 5, 64, 100, 1, 17, 33, 80], 32: [(17 * i) % 200 + 1 for i in range(32)]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.persistent", description=__doc__)
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--batch", default="1,8")
    p.add_argument("--sms", type=int, default=16, help="virtual SMs (seed i uses 1 + (i * 7) % SMS)")
    p.add_argument("--layers", type=int, default=3, help="layers of the persistent step case (default 3, batch 8)")
    args = p.parse_args(argv)
    ok = True
    for batch in (int(b) for b in args.batch.split(",")):
        if batch not in LENS:
            p.error(f"--batch {batch}: one of {sorted(LENS)}")
        case = C.make(C.SMALL, LENS[batch], seed=batch)
        for first in (False, True):
            sch = build(case.shape(first, **TILES))
            problems = check(sch)
            ref = C.reference(case, case.fresh_step(first))
            equal = 0
            for seed in range(args.seeds):
                run = simulate(sch, case.weights, case.fresh_step(first), 1 + (seed * 7) % args.sms, seed)
                equal += all(torch.equal(run.buffers[k], ref[k]) for k in ref)
            ok &= equal == args.seeds and not problems
            print(
                f"batch {batch} {'layer 0' if first else 'layer 1+'}: {len(sch.tasks)} tasks, static check "
                f"{len(problems)} problems; {equal}/{args.seeds} interleavings bitwise equal to the engine's layer"
            )
    step_case = C.make(C.SMALL, LENS[8], seed=8, layers=args.layers)
    sch = build_step(step_case.shape(False, **TILES), args.layers)
    problems = check(sch)
    ref = C.reference(step_case, step_case.fresh_step())
    equal = 0
    for seed in range(args.seeds):
        run = simulate(sch, step_case.weights, step_case.fresh_step(), 1 + (seed * 7) % args.sms, seed)
        equal += all(torch.equal(run.buffers[k], ref[k]) for k in ref)
    ok &= equal == args.seeds and not problems
    print(
        f"step of {args.layers} layers at batch 8: {len(sch.tasks)} tasks, static check {len(problems)} problems; "
        f"{equal}/{args.seeds} interleavings bitwise equal to the engine's layers"
    )
    case = C.make(C.SMALL, LENS[8], seed=8)
    sch = build(case.shape(False, **TILES))
    index = next(t.index for t in sch.tasks if t.kind == Kind.O_PROJ)
    tasks = list(sch.tasks)
    tasks[index] = replace(tasks[index], waits=())
    bad = Schedule(sch.shape, tasks, sch.counters, sch.expected)
    caught = 0
    for seed in range(args.seeds):
        try:
            simulate(bad, case.weights, case.fresh_step(), args.sms, seed)
        except ReadBeforeWrite:
            caught += 1
    problems = check(bad)
    ok &= bool(problems) and caught > 0
    print(
        f"seeded bug (task {index}, o_proj, without its wait on attention): static check {len(problems)} problems; "
        f"read-before-write in {caught}/{args.seeds} interleavings"
    )
    print("persistent layer: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
