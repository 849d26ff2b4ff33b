"""Where a persistent launch's time goes. The kernel can fill a trace (engine/cuda/persistent.py `TRACE`): for each
task, the SM that ran it and the global timer when its block turned to it, when its waits were met, when its input
was staged (a GEMV tile's rows, a score split's rotated q, a P.V slice's softmax statistics; 0 for other kinds) and
when it signalled.
`summarize` turns that into the launch's span, the share of block-time spent running, waiting and idle (no task:
the launch's ramp and drain), and per kind of task its run and wait time and how long its phase lasts in a layer
(first wait met to last signal), with the weight bytes the phase streams over that time, its input time (wait met
to input staged: the task's first round trips), and its wake: for a task taken before its counters reached their
targets, the time from the signal that completed its wait to the moment its block saw it (the poll's back-off; a
signal's time is read just after its release, so a wake can read a few ns below zero).

    python -m lab.persistent.trace [--layers 28] [--batch 1] [--context 1024] [--dtype bfloat16]
        [--take async|at-run|after-signal] [--json FILE] [--ledger DIR]

runs the decode step's persistent arm (the embedding, every layer and the final norm in one launch, Qwen3-0.6B's
layer shape with seeded random weights) once traced on the GPU and prints the summary, a table last. The traced
launch's span is printed beside the untraced launch's time (the decode step's own launch captured in a CUDA graph
and replayed, CUDA events, the same inputs) so the trace's own cost shows. On a machine without CUDA it says so and exits 0."""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from engine.cuda import persistent
from engine.cuda.persistent_schedule import Kind, Schedule
from lab.gates.ledger import figure, write_record
from lab.persistent import case as C

SM, TAKEN, MET, STAGED, SIGNALLED = range(len(persistent.TRACE))


@dataclass(frozen=True)
class KindTime:
    kind: str
    tasks: int
    run_us: float  # summed over its tasks
    wait_us: float  # summed: taken to waits met
    mean_run_us: float
    max_run_us: float
    phase_us: float  # mean over layers: the kind's first wait met to its last signal in that layer
    weight_bytes: int  # a layer's (0 for kinds that stream no weights)
    wake_us: float | None = None  # mean over its tasks that waited on a signal: that signal to the wait met
    input_us: float | None = None  # mean over its tasks that mark it: wait met to input staged

    @property
    def phase_gbs(self) -> float | None:
        """The weight bytes a layer's phase streams over the phase's time (GB/s); None without weights or time."""
        return self.weight_bytes / self.phase_us / 1e3 if self.weight_bytes and self.phase_us > 0 else None


@dataclass(frozen=True)
class Summary:
    tasks: int
    blocks: int  # SMs that ran a task
    span_us: float  # the first take to the last signal
    run_share: float  # of blocks x span: running tasks
    wait_share: float  # waiting on counters
    idle_share: float  # holding no task: the ramp before a block's first task and the drain after its last
    layer_us: float  # mean time between successive layers' last signals (the step's pace a layer)
    kinds: list[KindTime]


def summarize(trace: list[list[int]], sch: Schedule, weight_elt: int = 2) -> Summary:
    """The summary of one traced launch of `sch`'s table (every kind). Raises ValueError on a trace that does not
    describe a whole launch: a task never traced, or times out of order."""
    if len(trace) != len(sch.tasks):
        raise ValueError(f"a trace of {len(trace)} tasks for a table of {len(sch.tasks)}")
    for i, row in enumerate(trace):
        if len(row) != len(persistent.TRACE):
            raise ValueError(f"task {i}: {len(row)} trace fields, expected {len(persistent.TRACE)}")
        if row[TAKEN] <= 0:
            raise ValueError(f"task {i} was never traced (its block did not run it)")
        staged_ok = row[STAGED] == 0 or row[MET] <= row[STAGED] <= row[SIGNALLED]
        if not row[TAKEN] <= row[MET] <= row[SIGNALLED] or not staged_ok:
            raise ValueError(f"task {i}: times out of order (taken {row[TAKEN]}, met {row[MET]}, staged "
                             f"{row[STAGED]}, signalled {row[SIGNALLED]})")  # fmt: skip
    start = min(r[TAKEN] for r in trace)
    span = max(r[SIGNALLED] for r in trace) - start
    blocks = len({r[SM] for r in trace})
    run = [r[SIGNALLED] - r[MET] for r in trace]
    wait = [r[MET] - r[TAKEN] for r in trace]
    total = blocks * span if span > 0 else 1
    by_kind: dict[Kind, list[int]] = defaultdict(list)
    phases: dict[Kind, dict[int, tuple[int, int]]] = defaultdict(dict)
    layer_end: dict[int, int] = {}
    bytes_per_layer: dict[Kind, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    signals: dict[int, list[int]] = defaultdict(list)  # each counter's signal times, in order
    for task, row in zip(sch.tasks, trace, strict=True):
        signals[task.signal].append(row[SIGNALLED])
    for times in signals.values():
        times.sort()
    wakes: dict[Kind, list[int]] = defaultdict(list)
    for task, row in zip(sch.tasks, trace, strict=True):
        ready = max((signals[c][target - 1] for c, target in task.waits), default=0)
        if ready > row[TAKEN]:  # it waited on that signal
            wakes[task.kind].append(row[MET] - ready)
        by_kind[task.kind].append(task.index)
        lo, hi = phases[task.kind].get(task.layer, (row[MET], row[SIGNALLED]))
        phases[task.kind][task.layer] = (min(lo, row[MET]), max(hi, row[SIGNALLED]))
        layer_end[task.layer] = max(layer_end.get(task.layer, 0), row[SIGNALLED])
        bytes_per_layer[task.kind][task.layer] += task.weight_elems * weight_elt
    kinds = []
    for kind, idx in by_kind.items():
        runs, spans = [run[i] for i in idx], [hi - lo for lo, hi in phases[kind].values()]
        inputs = [trace[i][STAGED] - trace[i][MET] for i in idx if trace[i][STAGED]]
        kinds.append(KindTime(kind.name, len(idx), sum(runs) / 1e3, sum(wait[i] for i in idx) / 1e3,
                              sum(runs) / len(runs) / 1e3, max(runs) / 1e3, sum(spans) / len(spans) / 1e3,
                              max(bytes_per_layer[kind].values()), _mean_us(wakes[kind]), _mean_us(inputs)))  # fmt: skip
    kinds.sort(key=lambda k: -k.run_us)
    ends = [layer_end[k] for k in sorted(layer_end)]
    pace = (ends[-1] - ends[0]) / (len(ends) - 1) / 1e3 if len(ends) > 1 else span / 1e3
    return Summary(len(trace), blocks, span / 1e3, sum(run) / total, sum(wait) / total,
                   1 - (sum(run) + sum(wait)) / total, pace, kinds)  # fmt: skip


def _mean_us(ns: list[int]) -> float | None:  # an optional per-task time: None where no task has it
    return sum(ns) / len(ns) / 1e3 if ns else None


def render(s: Summary, title: str, untraced_us: float | None = None) -> str:
    out = [title, f"span {s.span_us:.1f} us over {s.blocks} blocks, {s.tasks} tasks"]
    if untraced_us is not None:
        out[-1] += f" (the same launch untraced: {untraced_us:.1f} us)"
    out.append(
        f"block-time: running {100 * s.run_share:.1f}%, waiting {100 * s.wait_share:.1f}%, idle (ramp and drain) "
        f"{100 * s.idle_share:.1f}%; a layer every {s.layer_us:.1f} us"
    )
    head = f"{'kind':<11}{'tasks':>7}{'run us':>10}{'wait us':>10}{'mean':>8}{'max':>8}{'phase us':>10}{'GB/s':>8}"
    out.append(head + f"{'wake us':>9}{'input us':>10}")
    for k in s.kinds:
        gbs = "-" if k.phase_gbs is None else f"{k.phase_gbs:.0f}"
        wake = "-" if k.wake_us is None else f"{k.wake_us:.2f}"
        staged = "-" if k.input_us is None else f"{k.input_us:.2f}"
        out.append(
            f"{k.kind:<11}{k.tasks:>7}{k.run_us:>10.1f}{k.wait_us:>10.1f}{k.mean_run_us:>8.2f}{k.max_run_us:>8.2f}"
            f"{k.phase_us:>10.2f}{gbs:>8}{wake:>9}{staged:>10}"
        )
    return "\n".join(out)


# --- GPU -------------------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m lab.persistent.trace", description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=28, help="layers in the launch (default 28, Qwen3-0.6B's)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--context", type=int, default=1024, help="every sequence's context, this step's token included")
    p.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--take", choices=list(persistent.TAKES), default=persistent.TAKE,
                   help=f"when a block takes its next task (engine/cuda/persistent.py TAKES; default "
                        f"{persistent.TAKE}, the engine's)")  # fmt: skip
    p.add_argument("--json", type=Path, metavar="FILE", help="write the raw trace and the summary as JSON")
    p.add_argument("--ledger", type=Path, metavar="DIR", help="write the summary as a ledger record into DIR")
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    for name in ("layers", "batch", "context"):
        if getattr(args, name) < 1:
            p.error(f"--{name} {getattr(args, name)}: must be at least 1")
    if args.layers > persistent.MAX_LAYERS:
        p.error(f"--layers {args.layers}: at most {persistent.MAX_LAYERS} in one launch")
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device (the persistent kernel runs only on a GPU)")
        return 0
    dev, dtype = torch.device("cuda"), getattr(torch, args.dtype)
    vocab = 4096  # the step's EMBED reads one row a sequence; the head is not in the arm's launch
    print(f"building {args.layers} layers of Qwen3-0.6B's shape on {torch.cuda.get_device_name(dev)} ...", flush=True)
    case = C.make_model(C.QWEN3_0_6B, [args.context] * args.batch, args.seed, args.layers, vocab, device=dev,
                        dtype=dtype)  # fmt: skip
    assert case.lm is not None
    step = C.on(case.fresh_step(True), dev, dtype)
    layers, model = C.model_tensors(case, step, head=False, fill=None, shared_scores=True)
    a = case.layers[0].self_attn
    shape = persistent.decode_shape(args.batch, 1024, a.num_heads, a.num_kv_heads, a.head_dim, 3072, True, None)
    sch = persistent.schedule_for(shape, args.layers, vocab)
    eps = case.lm.model.norm.eps

    take = args.take
    persistent.run_step(sch, persistent.BUILT, layers, eps, a.scaling, None, model, None, take)  # faults raise here
    persistent.launch_model(shape, vocab, layers, model, eps, a.scaling, take)  # its table and control words, once
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # the decode step's own launch, replayed: no host time between launches
        persistent.launch_model(shape, vocab, layers, model, eps, a.scaling, take)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        begin.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(begin.elapsed_time(end) * 1e3)
    faults = persistent.faults()
    if faults:
        print("FAIL: " + "; ".join(faults))
        return 1
    trace = torch.zeros(len(sch.tasks), len(persistent.TRACE), dtype=torch.int64, device=dev)
    persistent.run_step(sch, persistent.BUILT, layers, eps, a.scaling, None, model, trace, take)
    torch.cuda.synchronize()
    rows = trace.tolist()
    summary = summarize(rows, sch, torch.tensor([], dtype=dtype).element_size())
    device = torch.cuda.get_device_name(dev)
    title = (
        f"persistent step trace: embedding, {args.layers} layers, final norm in one launch; batch {args.batch}, "
        f"context {args.context}, {args.dtype}, take {take}, {device}"
    )
    untraced = sorted(times)[len(times) // 2]
    print(render(summary, title, untraced))
    if args.json:
        args.json.write_text(json.dumps({"title": title, "summary": asdict(summary), "trace": rows}))
        print(f"trace: {args.json}")
    if args.ledger:
        command = "python -m lab.persistent.trace " + " ".join(argv if argv is not None else sys.argv[1:])
        text = (
            f"{title}: span {summary.span_us:.0f} us (untraced, graph-replayed {untraced:.0f} us), a layer every "
            f"{summary.layer_us:.1f} us, block-time {100 * summary.run_share:.0f}% running, "
            f"{100 * summary.wait_share:.0f}% waiting"
        )
        figures = [figure("untraced_us", untraced, "us"), figure("layer_us", summary.layer_us, "us")]
        results = {"device": device, "take": take, "untraced_us": untraced, "summary": asdict(summary)}
        at = write_record(args.ledger, "persistent-step-trace", ["ENGINE-PERSISTENT"], command, "cuda", text,
                          results, kind="bench", figures=figures)  # fmt: skip
        print(f"ledger: {at}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
