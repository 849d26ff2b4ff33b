"""Run the persistent decode layer's schedule (engine/persistent.py) on virtual SMs on the CPU.

Each virtual SM does what a block of the persistent kernel would: take the next task from the queue head, wait
until the counters it names reach their targets, run the task (reads happen at its start), then publish its
writes and add one to its counter (at its finish). Which SM acts next is drawn at random, so one seed is one
legal interleaving: tasks overlap, finish out of queue order, and a consumer starts the moment its counters allow.
Scratch buffers and this step's cache slots start as NaN and every cell remembers whether it was written, so a
task that starts before its producer finished is caught twice: as a read-before-write (`ReadBeforeWrite`, with
`check_reads`) and, without the check, as NaN in the result.

Each task runs the engine's reference ops (engine/ops) on its tile, so the result is compared bitwise against
the engine's own `Qwen3DecoderLayer` on the same inputs (tests/lab/persistent/). On a GPU a tile fixes each
output's sum order itself; on the CPU the library picks it from the call's shape, so this stand-in keeps the
reference's bits only where the tile's call keeps them: GEMV tiles of any width at batch 1 (16 columns or more at
batch 8 and 32, measured with torch 2.13's CPU wheel), SiLU on multiples of 32 elements (its vector width; a
narrower tail runs a scalar path), and the scores computed by the reference's call over all keys (below).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

from engine.ops.act import silu_and_mul
from engine.ops.gemv import linear
from engine.ops.norm import fused_add_rms_norm, qk_norm, rms_norm
from engine.ops.paged_attn import gather_sequence
from engine.ops.rope import apply_rope_neox
from engine.persistent import Region, Schedule, Task, inputs


class ReadBeforeWrite(RuntimeError):
    """A task read cells that no finished task had written yet."""


class Deadlock(RuntimeError):
    """Every SM waits on a counter no running or queued task will raise."""


@dataclass
class Weights:
    """One decode layer's weights, by the reference op that reads them."""

    wq: torch.Tensor  # [heads * head_dim, hidden]
    wk: torch.Tensor  # [kv_heads * head_dim, hidden]
    wv: torch.Tensor
    wo: torch.Tensor  # [hidden, heads * head_dim]
    q_norm: torch.Tensor  # [head_dim]
    k_norm: torch.Tensor
    ln1: torch.Tensor  # [hidden]
    ln2: torch.Tensor
    wg: torch.Tensor  # [intermediate, hidden]
    wu: torch.Tensor
    wd: torch.Tensor  # [hidden, intermediate]
    eps: float
    scale: float
    window: int | None = None

    @classmethod
    def of(cls, layer) -> Weights:
        """From an engine `Qwen3DecoderLayer` (dense, no bias)."""
        a, m = layer.self_attn, layer.mlp
        return cls(
            a.q_proj.weight, a.k_proj.weight, a.v_proj.weight, a.o_proj.weight, a.q_norm.weight, a.k_norm.weight,
            layer.input_layernorm.weight, layer.post_attention_layernorm.weight, m.gate_proj.weight,
            m.up_proj.weight, m.down_proj.weight, a.eps, a.scaling, a.sliding_window,
        )  # fmt: skip


@dataclass
class Step:
    """One decode step's inputs to the layer: its input rows, the paged cache (written in place) and RoPE."""

    x: torch.Tensor  # [batch, hidden]
    residual: torch.Tensor | None  # [batch, hidden]; None for layer 0
    k_cache: torch.Tensor  # [num_blocks, block_size, kv_heads, head_dim]
    v_cache: torch.Tensor
    block_tables: torch.Tensor  # [batch, max_blocks] int32
    context_lens: torch.Tensor  # [batch] int32, this token included
    slot_mapping: torch.Tensor  # [batch] int64: this token's slot
    cos: torch.Tensor  # [batch, head_dim]
    sin: torch.Tensor


@dataclass
class Run:
    buffers: dict[str, torch.Tensor]
    events: list[tuple[str, int, int]] = field(default_factory=list)  # (start|finish, sm, task)
    max_overlap: int = 0  # tasks running at once, at most

    @property
    def order(self) -> list[int]:
        return [t for e, _, t in self.events if e == "finish"]


def simulate(
    sch: Schedule,
    w: Weights,
    step: Step,
    sms: int,
    seed: int,
    check_reads: bool = True,
) -> Run:
    """Run every task of `sch` on `sms` virtual SMs in the interleaving `seed` draws; the cache is written in place."""
    s = sch.shape
    dtype = step.x.dtype
    buffers = {name: torch.full(size, float("nan"), dtype=dtype) for name, size in s.buffers().items()}
    written = {name: torch.zeros(size, dtype=torch.bool) for name, size in s.buffers().items()}
    buffers["x"].copy_(step.x)
    if step.residual is not None:
        buffers["residual"].copy_(step.residual)
    for name in inputs(s):
        written[name].fill_(True)
    k_flat = step.k_cache.view(-1, *step.k_cache.shape[2:])
    v_flat = step.v_cache.view(-1, *step.v_cache.shape[2:])
    k_flat[step.slot_mapping] = float("nan")  # this step's slots: poison until the store writes them
    v_flat[step.slot_mapping] = float("nan")
    run = Run(buffers)
    ctx = _Context(s, w, step, buffers, k_flat, v_flat)
    counters = [0] * len(sch.counters)
    rng = random.Random(seed)
    head = 0
    # per SM: None (idle), ("wait", task) or ("run", task, pending writes)
    state: list[tuple | None] = [None] * sms
    finished = 0
    while finished < len(sch.tasks):
        actionable = []
        for sm, st in enumerate(state):
            if st is None:
                if head < len(sch.tasks):
                    actionable.append(sm)
            elif st[0] == "run" or all(counters[c] >= target for c, target in st[1].waits):
                actionable.append(sm)
        if not actionable:
            waiting = [st[1].index for st in state if st is not None]
            raise Deadlock(f"seed {seed}: every SM waits (tasks {waiting}); counters {counters}")
        sm = rng.choice(actionable)
        st = state[sm]
        if st is None:
            state[sm] = ("wait", sch.tasks[head])
            head += 1
        elif st[0] == "wait":
            task = st[1]
            if check_reads:
                _check_reads(task, written, seed)
            state[sm] = ("run", task, ctx.execute(task))
            run.events.append(("start", sm, task.index))
            run.max_overlap = max(run.max_overlap, sum(1 for x in state if x is not None and x[0] == "run"))
        else:
            task, writes = st[1], st[2]
            for region, value in writes:
                if region.buffer == "cache":
                    value()  # the K/V store: a write into the paged cache
                    continue
                rows, cols = slice(*region.rows), slice(*region.cols)
                buffers[region.buffer][rows, cols] = value
                written[region.buffer][rows, cols] = True
            counters[task.signal] += 1
            run.events.append(("finish", sm, task.index))
            state[sm] = None
            finished += 1
    return run


def _check_reads(task: Task, written: dict[str, torch.Tensor], seed: int) -> None:
    for r in task.reads:
        if not bool(written[r.buffer][slice(*r.rows), slice(*r.cols)].all()):
            raise ReadBeforeWrite(
                f"seed {seed}: task {task.index} ({task.kind.name} {task.args}) read {r.buffer}"
                f"[{r.rows[0]}:{r.rows[1]}, {r.cols[0]}:{r.cols[1]}] before it was written"
            )


class _Context:
    """Each kind of task on its tile, with the reference ops; returns the writes to publish at its finish."""

    def __init__(self, s, w: Weights, step: Step, buffers, k_flat, v_flat) -> None:
        self.s, self.w, self.step, self.b = s, w, step, buffers
        self.k_flat, self.v_flat = k_flat, v_flat

    def execute(self, t: Task) -> list[tuple[Region, object]]:
        return getattr(self, t.kind.name.lower())(t)

    def norm1(self, t: Task):
        r = t.args[0]
        x = self.b["x"][r : r + 1]
        if self.s.first:
            res, h = x.clone(), rms_norm(x, self.w.ln1, self.w.eps)
        else:
            h, res = fused_add_rms_norm(x, self.b["residual"][r : r + 1], self.w.ln1, self.w.eps)
        return [(t.writes[0], h), (t.writes[1], res)]

    def qkv(self, t: Task):
        part, c0, c1 = t.args
        weight = (self.w.wq, self.w.wk, self.w.wv)[part]
        return [(t.writes[0], linear(self.b["h1"], weight[c0:c1]))]

    def rope_store(self, t: Task):
        kv, s, d = t.args[0], self.s, self.s.head_dim
        g, rows = s.group, self.s.batch
        q = self.b["q"][:, kv * g * d : (kv + 1) * g * d].reshape(rows, g, d)
        k = self.b["k"][:, kv * d : (kv + 1) * d].reshape(rows, 1, d)
        v = self.b["v"][:, kv * d : (kv + 1) * d].reshape(rows, 1, d)
        cos, sin, eps = self.step.cos, self.step.sin, self.w.eps
        q_rot = apply_rope_neox(qk_norm(q, self.w.q_norm, eps), cos, sin)
        k_rot = apply_rope_neox(qk_norm(k, self.w.k_norm, eps), cos, sin)
        slots = self.step.slot_mapping

        def store() -> None:
            self.k_flat[slots, kv] = k_rot[:, 0]
            self.v_flat[slots, kv] = v[:, 0]

        cache = Region("cache", (0, 0), (0, 0))
        return [
            (t.writes[0], q_rot.reshape(rows, g * d)),
            (t.writes[1], k_rot.reshape(rows, d)),
            (t.writes[2], v.reshape(rows, d)),
            (cache, store),
        ]

    def _sequence(self, seq: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        n = int(self.step.context_lens[seq])
        bs = self.step.k_cache.shape[1]
        k, v = gather_sequence(self.k_flat, self.v_flat, self.step.block_tables[seq], n, bs)
        return k, v, n

    def scores(self, t: Task):
        seq, kv, k0, k1 = t.args
        g, d = self.s.group, self.s.head_dim
        qh = self.b["q_rot"][seq, kv * g * d : (kv + 1) * g * d].reshape(g, 1, d)
        keys, _, _ = self._sequence(seq)
        kh = keys[:, kv][None].expand(g, -1, -1)  # [group, n, D]: the group's heads share the KV head
        # Each score is one dot product over D. A GPU tile fixes that sum's order whatever its chunk; CPU BLAS picks
        # it from the call's shape (a chunk of one key runs as a dot product in another order), so this stand-in
        # makes the reference's call, over all n keys, and keeps its chunk: the chunk's values, the reference's bits.
        sc = torch.matmul(qh, kh.transpose(1, 2))[:, :, k0:k1] * self.w.scale  # the reference's points 1 and 2
        return [(t.writes[0], sc[:, 0, :])]

    def attn_out(self, t: Task):
        seq, kv = t.args
        g, d = self.s.group, self.s.head_dim
        _, values, n = self._sequence(seq)
        row = seq * self.s.heads + kv * g
        sc = self.b["scores"][row : row + g, :n][:, None, :]  # [group, 1, n]
        pos = torch.arange(n)
        diff = (n - 1) - pos
        allowed = (diff >= 0) & (diff < self.w.window if self.w.window is not None else diff >= 0)
        sc = sc.masked_fill(~allowed[None, None, :], float("-inf"))
        probs = torch.softmax(sc, dim=-1, dtype=torch.float32).to(sc.dtype)  # points 3 and 4
        vh = values[:, kv][None].expand(g, -1, -1)  # [group, n, D]
        out = torch.matmul(probs, vh)  # point 5
        return [(t.writes[0], out.reshape(1, g * d))]

    def o_proj(self, t: Task):
        c0, c1 = t.args
        o = linear(self.b["attn"], self.w.wo[c0:c1])
        return [(t.writes[0], o + self.b["res1"][:, c0:c1])]  # fused_add_rms_norm's `x + residual`

    def norm2(self, t: Task):
        r = t.args[0]
        return [(t.writes[0], rms_norm(self.b["res2"][r : r + 1], self.w.ln2, self.w.eps))]

    def gate_up(self, t: Task):
        c0, c1 = t.args
        h2 = self.b["h2"]
        gate_up = torch.cat([linear(h2, self.w.wg[c0:c1]), linear(h2, self.w.wu[c0:c1])], dim=-1)
        return [(t.writes[0], silu_and_mul(gate_up))]

    def down(self, t: Task):
        c0, c1 = t.args
        mlp = linear(self.b["act"], self.w.wd[c0:c1])
        return [(t.writes[0], mlp), (t.writes[1], mlp + self.b["res2"][:, c0:c1])]  # the next layer's sum
