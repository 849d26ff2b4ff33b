"""Run the persistent decode layer's schedule (engine/cuda/persistent_schedule.py) on virtual SMs on the CPU.

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

A whole model step (`build_model_step`) also runs the model's own tasks with its `Head` weights: EMBED (the
reference `embedding`, an exact row copy), FINAL_NORM (`fused_add_rms_norm`, the model's final norm) and HEAD
(`linear` on a tile of the head's rows), compared with the engine's `Qwen3ForCausalLM` (forward, then
`compute_logits`). The head's tiles obey the GEMV rule above, the tail tile included (measured: a vocabulary of 1000
in 32-column tiles leaves an 8-column tail that sums in another order at batch 8; 400 in 64-column tiles leaves 16).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

from engine.cuda.persistent_schedule import Kind, Region, Schedule, Task
from engine.flags import FlagSnapshot
from engine.model.batch import ForwardBatch
from engine.ops.act import silu_and_mul
from engine.ops.gemv import embedding, linear
from engine.ops.norm import fused_add_rms_norm, qk_norm, rms_norm
from engine.ops.paged_attn import gather_sequence
from engine.ops.rope import apply_rope_neox


class ReadBeforeWrite(RuntimeError):
    """A task read cells that no finished task had written yet."""


class Deadlock(RuntimeError):
    """Every SM waits on a counter no running or queued task will raise."""


# The chain the persistent kernels reproduce: their attention rounds the probabilities to bf16 before P.V, as the
# two-pass arm and the eager reference do, so they are held to the engine with the one-pass arm (fp32 probabilities,
# the default) turned off.
CHAIN_FLAGS = FlagSnapshot.defaults().with_(VT_ATTN_ONEPASS=False)


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
class Head:
    """A model's own weights around its layers: the embedding, the final norm and the LM head (the embedding's
    tensor itself where the model ties them, as Qwen3-0.6B does)."""

    embed: torch.Tensor  # [vocab, hidden]
    norm: torch.Tensor  # [hidden]
    head: torch.Tensor  # [vocab, hidden]
    eps: float

    @classmethod
    def of(cls, lm) -> Head:
        """From an engine `Qwen3ForCausalLM` (one rank: the whole vocabulary)."""
        m = lm.model
        return cls(m.embed_tokens.weight, m.norm.weight, lm.lm_head.weight, m.norm.eps)


@dataclass
class Step:
    """One decode step's inputs to the layers: its input rows (or, for a whole model step, its token ids), the
    paged cache (written in place) and RoPE."""

    x: torch.Tensor | None  # [batch, hidden]; None for a model step (its EMBED tasks write x)
    residual: torch.Tensor | None  # [batch, hidden]; None for layer 0
    k_cache: torch.Tensor  # [num_blocks, block_size, kv_heads, head_dim]
    v_cache: torch.Tensor
    block_tables: torch.Tensor  # [batch, max_blocks] int32
    context_lens: torch.Tensor  # [batch] int32, this token included
    slot_mapping: torch.Tensor  # [batch] int64: this token's slot
    cos: torch.Tensor  # [batch, head_dim]
    sin: torch.Tensor
    more_caches: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)  # a step's later layers
    ids: torch.Tensor | None = None  # [batch] int64: each row's token, a model step's input

    def caches(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(self.k_cache, self.v_cache), *self.more_caches]

    def batch(self, flags: FlagSnapshot | None = None) -> ForwardBatch:
        """The engine's decode batch of this step (its caches, written in place by whoever runs it), at the chain's
        flags (`CHAIN_FLAGS`) unless given others."""
        return ForwardBatch(
            is_prefill=False,
            slot_mapping=self.slot_mapping,
            kv_caches=self.caches(),
            block_tables=self.block_tables,
            context_lens=self.context_lens,
            flags=CHAIN_FLAGS if flags is None else flags,
        )


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
    w: Weights | list[Weights],  # a step's: one per layer
    step: Step,
    sms: int,
    seed: int,
    check_reads: bool = True,
    model: Head | None = None,  # a model step's (`Schedule.vocab`): embedding, final norm and head
) -> Run:
    """Run every task of `sch` on `sms` virtual SMs in the interleaving `seed` draws; the caches are written in
    place."""
    weights = w if isinstance(w, list) else [w]
    caches = step.caches()
    if len(weights) != sch.layers or len(caches) != sch.layers:
        raise ValueError(f"{sch.layers} layers: {len(weights)} weights and {len(caches)} caches given")
    if bool(sch.vocab) != (model is not None and step.ids is not None):
        raise ValueError("a model step takes the model's Head and the step's ids; a layer step neither")
    dtype = weights[0].wq.dtype
    sizes = sch.buffers()
    buffers = {name: torch.full(size, float("nan"), dtype=dtype) for name, size in sizes.items()}
    written = {name: torch.zeros(size, dtype=torch.bool) for name, size in sizes.items()}
    if step.ids is not None and sch.vocab:
        buffers["ids"] = step.ids.to(torch.int64).view(-1, 1)
    if step.x is not None and not sch.vocab:
        buffers["x"].copy_(step.x)
    if step.residual is not None and not sch.vocab:
        buffers["residual"].copy_(step.residual)
    for name in sch.inputs():
        written[name].fill_(True)
    flats = []
    for k_cache, v_cache in caches:
        k_flat, v_flat = k_cache.view(-1, *k_cache.shape[2:]), v_cache.view(-1, *v_cache.shape[2:])
        k_flat[step.slot_mapping] = float("nan")  # this step's slots: poison until the store writes them
        v_flat[step.slot_mapping] = float("nan")
        flats.append((k_flat, v_flat))
    run = Run(buffers)
    ctx = _Context(sch, weights, step, buffers, flats, model)
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


MODEL_KINDS = (Kind.EMBED, Kind.FINAL_NORM, Kind.HEAD)  # run with the model's weights, not a layer's


class _Context:
    """Each kind of task on its tile, with the reference ops; returns the writes to publish at its finish."""

    def __init__(self, sch: Schedule, weights: list[Weights], step: Step, buffers, flats, model: Head | None) -> None:
        self.sch, self.s, self.ws, self.step, self.b, self.flats = sch, sch.shape, weights, step, buffers, flats
        self.model = model

    def execute(self, t: Task) -> list[tuple[Region, object]]:
        return getattr(self, t.kind.name.lower())(t, self.model if t.kind in MODEL_KINDS else self.ws[t.layer])

    def embed(self, t: Task, m: Head):
        r = t.args[0]
        return [(t.writes[0], embedding(self.b["ids"][r], m.embed))]  # the row's token's row: a copy, exact

    def final_norm(self, t: Task, m: Head):
        r = t.args[0]
        mlp, res2 = (self.b[region.buffer][r : r + 1] for region in t.reads)
        return [(t.writes[0], fused_add_rms_norm(mlp, res2, m.norm, m.eps)[0])]  # the model's Qwen3Model.norm

    def head(self, t: Task, m: Head):
        c0, c1 = t.args
        return [(t.writes[0], linear(self.b["final"], m.head[c0:c1]))]  # lm_head's columns c0..c1

    def buf(self, t: Task, name: str) -> torch.Tensor:
        return self.b[self.sch.name(t.layer, name)]

    def _input(self, t: Task, w: Weights) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer's input normalised (what a q/k/v tile stages) and its residual sum, for every row."""
        x = self.b[t.reads[0].buffer]  # the step's input, or the last layer's output
        if len(t.reads) == 1:  # layer 0 of the model: no residual yet
            return rms_norm(x, w.ln1, w.eps), x.clone()
        return fused_add_rms_norm(x, self.b[t.reads[1].buffer], w.ln1, w.eps)

    def qkv(self, t: Task, w: Weights):
        part, c0, c1 = t.args
        h1, res1 = self._input(t, w)
        weight = (w.wq, w.wk, w.wv)[part]
        out = [(t.writes[0], linear(h1, weight[c0:c1]))]
        return out + [(region, res1) for region in t.writes[1:]]  # the layer's first tile: the sum o_proj adds

    def _rotated(self, t: Task, w: Weights, seq: int, kv: int, newest: bool):
        """Row `seq`'s group of q heads normed and rotated, [g, d]; with `newest` (the split that holds the newest
        key) also its k head normed and rotated and its v head, [d] each (else None)."""
        g, d, row = self.s.group, self.s.head_dim, slice(seq, seq + 1)
        cos, sin = self.step.cos[row], self.step.sin[row]
        q = self.buf(t, "q")[row, kv * g * d : (kv + 1) * g * d].reshape(1, g, d)
        q_rot = apply_rope_neox(qk_norm(q, w.q_norm, w.eps), cos, sin).reshape(g, d)
        if not newest:
            return q_rot, None, None
        k = self.buf(t, "k")[row, kv * d : (kv + 1) * d].reshape(1, 1, d)
        k_rot = apply_rope_neox(qk_norm(k, w.k_norm, w.eps), cos, sin).reshape(d)
        return q_rot, k_rot, self.buf(t, "v")[seq, kv * d : (kv + 1) * d]

    def _sequence(self, t: Task, seq: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        n = int(self.step.context_lens[seq])
        k_flat, v_flat = self.flats[t.layer]
        k, v = gather_sequence(k_flat, v_flat, self.step.block_tables[seq], n, self.step.k_cache.shape[1])
        return k, v, n

    def scores(self, t: Task, w: Weights):
        seq, kv, split, splits = t.args
        k0, k1 = self.s.key_range(seq, split)  # the kernel's bounds, from the context length at run time
        g, d = self.s.group, self.s.head_dim
        q_rot, k_rot, v = self._rotated(t, w, seq, kv, split == splits - 1)
        keys, _, n = self._sequence(t, seq)
        if k_rot is not None:  # the newest key is this task's own: its slot is stored at the task's finish
            keys = keys.clone()
            keys[n - 1, kv] = k_rot
        qh = q_rot.reshape(g, 1, d)
        kh = keys[:, kv][None].expand(g, -1, -1)  # [group, n, D]: the group's heads share the KV head
        # Each score is one dot product over D. A GPU tile fixes that sum's order whatever its chunk; CPU BLAS picks
        # it from the call's shape (a chunk of one key runs as a dot product in another order), so this stand-in
        # makes the reference's call, over all n keys, and keeps its chunk: the chunk's values, the reference's bits.
        sc = torch.matmul(qh, kh.transpose(1, 2))[:, :, k0:k1] * w.scale  # the reference's points 1 and 2
        out: list[tuple[Region, object]] = [(t.writes[0], sc[:, 0, :])]
        if k_rot is None or v is None:
            return out
        slot, (k_flat, v_flat) = self.step.slot_mapping[seq], self.flats[t.layer]

        def store() -> None:
            k_flat[slot, kv] = k_rot
            v_flat[slot, kv] = v

        rotated = (q_rot.reshape(1, g * d), k_rot.reshape(1, d), v.reshape(1, d))
        return out + list(zip(t.writes[1:], rotated, strict=True)) + [(Region("cache", (0, 0), (0, 0)), store)]

    def attn_out(self, t: Task, w: Weights):
        seq, kv, part, parts = t.args
        g, d = self.s.group, self.s.head_dim
        _, values, n = self._sequence(t, seq)
        row = seq * self.s.heads + kv * g
        sc = self.buf(t, "scores")[row : row + g, :n][:, None, :]  # [group, 1, n]
        diff = (n - 1) - torch.arange(n)
        allowed = (diff >= 0) & (diff < w.window if w.window is not None else diff >= 0)
        sc = sc.masked_fill(~allowed[None, None, :], float("-inf"))
        probs = torch.softmax(sc, dim=-1, dtype=torch.float32).to(sc.dtype)  # points 3 and 4
        vh = values[:, kv][None].expand(g, -1, -1)  # [group, n, D]
        # the whole head's P.V, its slice kept: a CPU matmul over a slice of V's columns may sum in another order
        out = torch.matmul(probs, vh)[:, 0]  # point 5, [group, D]
        if parts == 1:  # whole heads: one region of the group's columns
            return [(t.writes[0], out.reshape(1, g * d))]
        width = d // parts
        return [(region, out[h : h + 1, part * width : (part + 1) * width]) for h, region in enumerate(t.writes)]

    def o_proj(self, t: Task, w: Weights):
        c0, c1 = t.args
        o = linear(self.buf(t, "attn"), w.wo[c0:c1])
        return [(t.writes[0], o + self.buf(t, "res1")[:, c0:c1])]  # fused_add_rms_norm's `x + residual`

    def gate_up(self, t: Task, w: Weights):
        c0, c1 = t.args
        h2 = rms_norm(self.buf(t, "res2"), w.ln2, w.eps)  # the tile's staged rows: the post-attention norm
        gate_up = torch.cat([linear(h2, w.wg[c0:c1]), linear(h2, w.wu[c0:c1])], dim=-1)
        return [(t.writes[0], silu_and_mul(gate_up))]

    def down(self, t: Task, w: Weights):
        c0, c1 = t.args
        mlp = linear(self.buf(t, "act"), w.wd[c0:c1])
        return [(t.writes[0], mlp), (t.writes[1], mlp + self.buf(t, "res2")[:, c0:c1])]  # the next layer's sum
