"""A model of the persistent decode layer's time on the H200, from its schedule's bytes: why it would reach a given
fraction of the weight-streaming floor, and what a grid barrier per phase (today's chain of launches) costs.

    python -m lab.persistent.model [--batch 1,8,32] [--context 1024] [--layers 28] [--sms 132] [--head-cols 128]

Every number here is an assumption stated in `Machine`, not a measurement: an SM streams DRAM at the copy bandwidth
(the 4.2 TB/s the H200 records measure) shared among the SMs busy when it starts, at most `sm_peak_bytes_per_s`
alone; activations come from L2 (shared the same way), a task pays a fixed cost
for its counter wait and signal, and a task's weights (up to `smem_bytes`) stream into shared memory while it
still waits on its counters, the point of fine-grained dependencies. SMs take tasks in queue order, each as soon
as it is free (list scheduling); layers follow each other, the next layer's q/k/v tiles waiting on the last one's
down tiles. The floor is the decode bench's: the weights read once, plus the K/V once at batch > 1.

Below the layers' rows, the whole decode step (`build_model_step`: each row's embedding, the layers, the final
norm, the LM head in tiles of `--head-cols` vocabulary columns) against the whole step's floor, which adds the head
(Qwen3-0.6B's 151936 x 1024, 311 MB in bf16: the embedding's own matrix, the model ties them, so it is read once,
by the head; the EMBED tasks read one row a token) to the layers' weights. The model's sizes are Qwen3-0.6B's from
its config, the tiles and the machine are assumptions.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import dataclass, replace

from engine.cuda import persistent
from engine.cuda.persistent_schedule import Kind, LayerShape, Schedule, Task, build, build_model_step

KV_KINDS = (Kind.SCORES, Kind.ATTN_OUT)
VOCAB = 151936  # Qwen3-0.6B's vocabulary (config.json `vocab_size`); the LM head is [VOCAB, hidden]
HEAD_COLS = 128  # vocabulary columns per head tile: 1187 tiles (9 a SM on 132), 256 KB of bf16 weight each


@dataclass(frozen=True)
class Machine:
    sms: int = 132
    dram_bytes_per_s: float = 4.2e12  # the H200's measured copy bandwidth (ledger 2026-12-04, 4.21-4.26 TB/s)
    sm_peak_bytes_per_s: float = 100e9  # one SM streaming alone (assumed; about 3x its share of a full machine)
    l2_bytes_per_s: float = 10e12  # activations, written and read back within the layer (assumed)
    task_overhead_s: float = 0.5e-6  # poll a counter in L2, run, signal (assumed)
    smem_bytes: int = 160 * 1024  # weights a task may stream ahead of its waits
    elt: int = 2  # bf16
    barrier_s: float = 0.0  # with `barriers`: a launch's ramp and drain at each phase boundary


@dataclass
class TaskBytes:
    weights: int
    kv: int
    act: int


def task_bytes(t: Task, s: LayerShape, elt: int) -> TaskBytes:
    d = s.head_dim
    if t.kind == Kind.SCORES:  # its split of the keys
        k0, k1 = s.key_range(t.args[0], t.args[2])
        kv = (k1 - k0) * d * elt
    elif t.kind == Kind.ATTN_OUT:  # its slice of V's columns, over every allowed key or split_pv's key range
        seq, _, _, parts = t.args[:4]
        k0, k1 = t.args[4:6] if len(t.args) == 6 else (s.key_range(seq, 0)[0], s.context_lens[seq])
        kv = (k1 - k0) * (d // parts) * elt
    else:
        kv = 0
    act = sum(r.cells() for r in (*t.reads, *t.writes) if r.buffer != "scores") * elt
    scores = sum(r.cells() for r in (*t.reads, *t.writes) if r.buffer == "scores") * 4  # fp32 scores
    return TaskBytes(t.weight_elems * elt, kv, act + scores)


@dataclass
class Timing:
    makespan_s: float
    floor_s: float
    critical_s: float  # the longest chain of waits, with unlimited SMs
    by_kind: dict[str, tuple[int, int, int, float]]  # kind: tasks, weight bytes, kv bytes, SM-seconds busy

    @property
    def fraction(self) -> float:
        return self.floor_s / self.makespan_s


def estimate(
    sch: Schedule, m: Machine, layers: int = 1, barriers: bool = False, launch_per_layer: bool = False
) -> Timing:
    """List-schedule `layers` copies of the layer's tasks on `m.sms` SMs. With `barriers`, a phase (a kind of
    task) starts only when the previous phase has finished everywhere, and pays `m.barrier_s`, and nothing is
    streamed ahead of it: the chain of launches, with the same tiles. With `launch_per_layer`, only a layer is a
    phase: the persistent layer launched once a layer (the kernel table's `decode_layer` arm), against the whole
    step in one launch (neither: `decode_model`'s arm)."""
    s = sch.shape
    free = [0.0] * m.sms
    done_at: dict[tuple[int, int], list[float]] = defaultdict(list)  # (layer, counter): finish times
    chain: dict[tuple[int, int], float] = {}  # (layer, counter): the longest chain of waits to its last signal
    by_kind: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0, 0.0])
    phase_end, phase, barrier_at, end_all = 0.0, (-1, -1), 0.0, 0.0
    down = sch.tasks[-1].signal
    total_w = total_kv = 0
    for layer in range(layers):
        for t in sch.tasks:
            b = task_bytes(t, s, m.elt)
            waits = [((layer, c), target) for c, target in t.waits]
            if t.kind == Kind.QKV and layer > 0:  # the next layer starts on the last one's output
                waits.append(((layer - 1, down), sch.expected[down]))
            ready = max((sorted(done_at[key])[target - 1] for key, target in waits), default=0.0)
            key = (layer, -1) if launch_per_layer else (layer, t.kind)
            if (barriers or launch_per_layer) and key != phase:
                barrier_at, phase = phase_end + m.barrier_s, key
            sm = min(range(m.sms), key=lambda i: free[i])
            pop = max(free[sm], barrier_at)
            ahead = 0 if barriers else min(b.weights, m.smem_bytes)
            fetched = pop + ahead / _rate(m, free, pop, m.dram_bytes_per_s)
            start = max(fetched, ready)
            dram, l2 = _rate(m, free, start, m.dram_bytes_per_s), _rate(m, free, start, m.l2_bytes_per_s)
            body = (b.weights - ahead + b.kv) / dram + b.act / l2 + m.task_overhead_s
            end = start + body
            free[sm] = end
            done_at[(layer, t.signal)].append(end)
            longest = max((chain.get(key, 0.0) for key, _ in waits), default=0.0)
            chain[(layer, t.signal)] = max(chain.get((layer, t.signal), 0.0), max(longest, fetched - pop) + body)
            phase_end, end_all = max(phase_end, end), max(end_all, end)
            k = by_kind[t.kind.name]
            k[0] += 1
            k[1] += b.weights
            k[2] += b.kv
            k[3] += end - pop
            total_w += b.weights
            total_kv += b.kv
    floor = (total_w + (total_kv if s.batch > 1 else 0)) / m.dram_bytes_per_s
    kinds = {name: (int(v[0]), int(v[1]), int(v[2]), v[3]) for name, v in by_kind.items()}
    return Timing(end_all, floor, max(chain.values()), kinds)


def split_pv(sch: Schedule, splits: int) -> Schedule:
    """For the time model only: each softmax-and-P.V task as `splits` tasks over key ranges (they read V's share of
    the keys) and a combine of their partial outputs. That is an online softmax across splits, another numerics
    than the chain's (an arm judged by the razor), so the simulation does not run it."""
    out = Schedule(sch.shape, [], list(sch.counters), [0] * len(sch.counters))
    for t in sch.tasks:
        if t.kind != Kind.ATTN_OUT:
            out.add(t.kind, t.args, t.waits, t.signal, t.reads, t.writes, t.weight_elems)
            continue
        seq, kv, part, parts = t.args
        if parts != 1:
            raise ValueError("split_pv splits whole heads' P.V (pv_slices 1)")
        n = sch.shape.context_lens[seq]
        done = out.counter(f"pv[{seq},{kv}]")
        step = -(-n // splits)
        for k0 in range(0, n, step):
            out.add(Kind.ATTN_OUT, (seq, kv, 0, 1, k0, min(n, k0 + step)), t.waits, done, t.reads[:1], ())
        out.add(Kind.ATTN_OUT, (seq, kv, 0, 1, 0, 0), [(done, out.expected[done])], t.signal, (), t.writes)
    return out


def _rate(m: Machine, free: list[float], at: float, total: float) -> float:
    """One SM's share of `total` bytes/s among the SMs busy at `at` (itself included), at most its peak."""
    busy = 1 + sum(1 for f in free if f > at)
    return min(m.sm_peak_bytes_per_s * total / m.dram_bytes_per_s, total / busy)


def qwen3_0_6b(batch: int, context: int) -> LayerShape:
    """Qwen3-0.6B's layer with the kernel's tiles (`persistent.TILES`), sized for about one wave of 132 SMs per
    phase, each tile's weights within shared memory: q/k/v 32 columns (128 tiles), o_proj and down 8 (128 each),
    gate/up 32 (96: a multiple of 32 keeps the CPU stand-in's SiLU bitwise, lab/persistent/sim.py), 4 score splits
    and 4 P.V slices per (sequence, KV head)."""
    return LayerShape(1024, 16, 8, 128, 3072, (context,) * batch, False, **persistent.TILES)


def qwen3_0_6b_step(batch: int, context: int, layers: int = 28, head_cols: int = HEAD_COLS) -> Schedule:
    """Qwen3-0.6B's whole decode step: embedding, `layers` layers with `qwen3_0_6b`'s tiles, final norm, head."""
    return build_model_step(qwen3_0_6b(batch, context), layers, VOCAB, head_cols)


def step_floor_bytes(s: LayerShape, layers: int, vocab: int, elt: int = 2) -> int:
    """The whole step's bytes read at least once: every layer's matrices (the norms' vectors left out, as the
    layers' floor does), the head's [vocab, hidden] (a tied embedding is that same matrix), one embedding row per
    sequence, and the K/V once at batch > 1."""
    h, q, kv = s.hidden, s.heads * s.head_dim, s.kv_heads * s.head_dim
    layer = h * (q + 2 * kv) + q * h + 3 * h * s.intermediate
    cache = 2 * sum(s.context_lens) * kv if s.batch > 1 else 0  # K and V of every allowed key, every layer
    return elt * (layers * (layer + cache) + vocab * h + s.batch * h)


def render_step(rows: list[tuple[int, Timing, Timing]], layers: int, head_cols: int) -> str:
    """The whole step beside its layers: `rows` are (batch, the step's timing, the layers' alone). `+ head` columns:
    the step's minus the layers' (the head, with the embedding's rows and the final norm)."""
    out = [
        f"whole decode step: embedding, {layers} layers, final norm, LM head {VOCAB} x 1024 "
        f"({VOCAB * 1024 * 2 / 1e6:.1f} MB bf16, tied to the embedding) in {head_cols}-column tiles "
        "(a model, not a measurement)",
        f"{'batch':>5} {'floor us':>9} {'+ head floor us':>16} {'persistent us':>14} {'% floor':>8} "
        f"{'layers alone us':>16} {'+ head us':>10} {'critical us':>12}",
    ]
    for batch, step, chain in rows:
        out.append(
            f"{batch:>5} {step.floor_s * 1e6:>9.1f} {(step.floor_s - chain.floor_s) * 1e6:>16.1f} "
            f"{step.makespan_s * 1e6:>14.1f} {step.fraction:>8.1%} {chain.makespan_s * 1e6:>16.1f} "
            f"{(step.makespan_s - chain.makespan_s) * 1e6:>10.1f} {step.critical_s * 1e6:>12.1f}"
        )
    return "\n".join(out)


def render(rows: list[tuple[int, Timing, Timing, Timing, Timing, Timing]], layers: int, splits: int) -> str:
    out = [
        f"persistent decode, Qwen3-0.6B's layer x {layers} (a model of the H200, not a measurement)",
        f"{'batch':>5} {'floor us':>9} {'persistent us':>14} {'% floor':>8} {'1 layer %':>10} {'a launch a layer %':>19} "
        f"{'barriers %':>11} {'critical us':>12} {f'P.V split {splits} %':>16}",
    ]
    for batch, step, one, per_layer, barrier, split in rows:
        out.append(
            f"{batch:>5} {step.floor_s * 1e6:>9.1f} {step.makespan_s * 1e6:>14.1f} {step.fraction:>8.1%} "
            f"{one.fraction:>10.1%} {per_layer.fraction:>19.1%} {barrier.fraction:>11.1%} "
            f"{step.critical_s * 1e6:>12.1f} {split.fraction:>16.1%}"
        )
    out.append(f"one layer at batch {rows[0][0]}: kind, tasks, weight KB, K/V KB, SM-us held (waits included)")
    for name, (n, w, kv, busy) in rows[0][2].by_kind.items():
        out.append(f"  {name:<11} {n:>5} {w / 1024:>9.0f} {kv / 1024:>8.0f} {busy * 1e6:>9.1f}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.persistent.model", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--batch", default="1,8,32")
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--layers", type=int, default=28)
    p.add_argument("--sms", type=int, default=132)
    p.add_argument("--barrier-us", type=float, default=3.0, help="a launch's ramp and drain in the barrier model")
    p.add_argument("--pv-splits", type=int, default=8, help="key ranges per P.V task in the split column (default 8)")
    p.add_argument("--head-cols", type=int, default=HEAD_COLS, help="vocabulary columns per LM-head tile")
    args = p.parse_args(argv)
    m = Machine(sms=args.sms)
    rows, steps = [], []
    for batch in (int(x) for x in args.batch.split(",")):
        sch = build(qwen3_0_6b(batch, args.context))
        barrier = Machine(sms=args.sms, barrier_s=args.barrier_us * 1e-6)
        split = estimate(split_pv(build(replace(sch.shape, pv_slices=1)), args.pv_splits), m, args.layers)
        rows.append(
            (
                batch,
                estimate(sch, m, args.layers),
                estimate(sch, m, 1),
                estimate(sch, barrier, args.layers, launch_per_layer=True),
                estimate(sch, barrier, args.layers, True),
                split,
            )
        )
        whole = qwen3_0_6b_step(batch, args.context, args.layers, args.head_cols)
        steps.append((batch, estimate(whole, m, 1), rows[-1][1]))
    print(render(rows, args.layers, args.pv_splits))
    print(render_step(steps, args.layers, args.head_cols))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
