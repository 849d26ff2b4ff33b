"""The persistent decode layer's schedule: one Qwen3 decode layer as a graph of tiles with dependency counters.

The persistent kernel (engine/cuda/persistent.cuh; one launch, one block per SM) reads this table and nothing else: each block takes the
next task index from a queue head in global memory (an atomic add), waits until each counter it names reaches its
target, runs the task, and adds one to its own counter. No grid barrier: a q/k/v tile starts when the layer's input
is written, a score split when its KV group's q/k/v tiles are, and so on down the layer. Tasks are queued in a
topological order (every producer ahead of its consumers), so blocks taking them in queue order can always make
progress, with any number of blocks.

    qkv[tile] (input norm) -> scores[seq, kv head, key split] (q/k norm, RoPE; the last split stores K/V)
      -> attn_out[seq, kv head, slice] -> o_proj[tile] (+ residual) -> gate_up[tile] (norm; SiLU * up)
      -> down[tile] (+ residual)

The norms and RoPE are no tasks of their own: each GEMV tile normalises the rows it reads as it stages them (the
chain's GEMV prologue form: every tile recomputes a row's sum of squares, a few KB from L2 against its tile of
weights), and each score split norms and rotates its sequence's q heads; so a layer's critical path is six phases,
not nine. The first q/k/v tile of a layer also writes the residual sum (`res1`) that o_proj adds.

`build_step` chains layers; `build_model_step` is the whole decode step, token ids to logits:

    embed[row] -> layer 0 -> ... -> layer N-1 -> final_norm[row] -> head[vocabulary tile]

Each task names the regions of the layer's buffers it reads and writes (`Region`: rows and columns of a 2-D
buffer), so lab/persistent/check.py can prove, without running anything, that every read is ordered after its
writers by the counters; lab/persistent/sim.py runs the table on virtual SMs on the CPU and compares against the
engine's own layer.
The GEMV tiles split output columns only (every tile reads all K of its rows), and attention splits only the
scores over keys: the splits that keep every sum in the reference's order, so the tiled layer is bitwise the
chain of ops. A split-K or split-softmax tile would be another numerics, judged by the razor like any arm.

The encoded table holds no context length: a score task names its split (`key_range` divides the sequence's
allowed keys at run time, from the context length the kernel reads on the device), so one table serves every decode
step of a batch size and a captured CUDA graph replays it as the lengths grow. The regions, `check` and the
simulation use the shape's `context_lens` as one instance of those run-time lengths.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import IntEnum


class Kind(IntEnum):
    QKV = 0  # [part, col0, col1]: columns of q (part 0), k (1) or v (2) for every row, of the input's norm
    SCORES = 1  # [seq, kv head, split, splits]: q.k for the group's heads over one split of the allowed keys
    ATTN_OUT = 2  # [seq, kv head, slice, slices]: softmax of the group's heads, P.V on one slice of head_dim
    O_PROJ = 3  # [col0, col1]: o_proj columns plus the residual
    GATE_UP = 4  # [col0, col1]: gate and up columns of the residual's norm, SiLU(gate) * up
    DOWN = 5  # [col0, col1]: down_proj columns plus the residual
    # the model's own tasks around the layers (a whole decode step, `build_model_step`); their weights are the
    # model's, their `layer` the one whose buffers they touch (0 for EMBED, the last for FINAL_NORM and HEAD)
    EMBED = 6  # [row]: the row's token's embedding row into the step's x (layer 0's input)
    FINAL_NORM = 7  # [row]: the model's final fused add + RMSNorm of the last layer's mlp + res2
    HEAD = 8  # [col0, col1]: LM-head columns (a tile of the vocabulary) for every row: the logits


@dataclass(frozen=True)
class LayerShape:
    """One decode step of one layer: the model's sizes, each sequence's context and the tile sizes."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    context_lens: tuple[int, ...]  # per sequence, this step's token included
    first: bool = False  # layer 0: its input is the embedding, no residual to add before the first norm
    qkv_cols: int = 64  # output columns per q/k/v tile (divides head_dim)
    o_cols: int = 64
    gu_cols: int = 64
    down_cols: int = 64
    key_splits: int = 4  # score tasks per (sequence, KV head), each taking its share of the keys at run time
    pv_slices: int = 1  # P.V tasks per (sequence, KV head), each writing head_dim / pv_slices columns of each head
    window: int | None = None  # sliding window (keys allowed before the newest, itself included); None: all

    @property
    def batch(self) -> int:
        return len(self.context_lens)

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    def key_range(self, seq: int, split: int) -> tuple[int, int]:
        """The keys [k0, k1) score task `split` of sequence `seq` computes: `key_range` over its context."""
        return key_range(self.context_lens[seq], self.window, split, self.key_splits)

    def buffers(self) -> dict[str, tuple[int, int]]:
        """Every buffer a task reads or writes, [rows, cols]. `k_new`/`v_new` stand for the cache slots this step
        writes (one per sequence); the older cache positions are written by earlier steps."""
        b, h, d, i = self.batch, self.hidden, self.head_dim, self.intermediate
        return {
            "x": (b, h),
            "residual": (b, h),
            "res1": (b, h),
            "q": (b, self.heads * d),
            "k": (b, self.kv_heads * d),
            "v": (b, self.kv_heads * d),
            "q_rot": (b, self.heads * d),
            "k_new": (b, self.kv_heads * d),
            "v_new": (b, self.kv_heads * d),
            "scores": (b * self.heads, max(self.context_lens)),
            "attn": (b, self.heads * d),
            "res2": (b, h),
            "act": (b, i),
            "mlp": (b, h),
            "out": (b, h),
        }


@dataclass(frozen=True)
class Region:
    buffer: str
    rows: tuple[int, int]  # [start, stop)
    cols: tuple[int, int]

    def cells(self) -> int:
        return (self.rows[1] - self.rows[0]) * (self.cols[1] - self.cols[0])

    def overlap(self, other: Region) -> int:
        if self.buffer != other.buffer:
            return 0
        r = min(self.rows[1], other.rows[1]) - max(self.rows[0], other.rows[0])
        c = min(self.cols[1], other.cols[1]) - max(self.cols[0], other.cols[0])
        return max(r, 0) * max(c, 0)


@dataclass(frozen=True)
class Task:
    index: int  # its place in the queue
    kind: Kind
    args: tuple[int, ...]
    waits: tuple[tuple[int, int], ...]  # (counter, target): start once the counter has reached the target
    signal: int  # the counter this task adds one to when its writes are done
    reads: tuple[Region, ...]
    writes: tuple[Region, ...]
    weight_elems: int = 0  # weight elements it streams (no dependency: loadable before its waits are met)
    layer: int = 0  # whose weights and cache (a step's tasks run every layer in turn)


@dataclass
class Schedule:
    shape: LayerShape
    tasks: list[Task] = field(default_factory=list)
    counters: list[str] = field(default_factory=list)  # names, by index
    expected: list[int] = field(default_factory=list)  # tasks signalling each counter
    layers: int = 1  # a step's layers; one layer's schedule names its buffers without a prefix
    vocab: int = 0  # a whole model step's (`build_model_step`): token ids in, logits out; 0 for layers alone
    shared: frozenset[str] = frozenset()  # a step's buffers every layer reuses (one tensor), each layer a version

    def name(self, layer: int, buffer: str) -> str:
        """A buffer's name in this schedule: `L<layer>.` before it in a step (the inputs `x`, `residual` and the
        `shared` scratch are the step's own)."""
        own = self.layers == 1 or buffer in ("x", "residual") or buffer in self.shared
        return buffer if own else f"L{layer}.{buffer}"

    def buffers(self) -> dict[str, tuple[int, int]]:
        """Every buffer the tasks read or write, [rows, cols]; a model step's adds its token ids (`ids`, one per
        row), the final norm's output (`final`) and the `logits`."""
        sizes = {self.name(layer, n): size for layer in range(self.layers) for n, size in self.shape.buffers().items()}
        if self.vocab:
            b, h = self.shape.batch, self.shape.hidden
            sizes.update(ids=(b, 1), final=(b, h), logits=(b, self.vocab))
        return sizes

    def inputs(self) -> set[str]:
        """The buffers written before the table starts: the token ids of a model step, else the layers' input."""
        return {"ids"} if self.vocab else inputs(self.shape)

    def counter(self, name: str) -> int:
        self.counters.append(name)
        self.expected.append(0)
        return len(self.counters) - 1

    def add(
        self,
        kind: Kind,
        args: tuple[int, ...],
        waits,
        signal: int,
        reads,
        writes,
        weight_elems: int = 0,
        layer: int = 0,
    ) -> None:
        self.expected[signal] += 1
        self.tasks.append(
            Task(len(self.tasks), kind, args, tuple(waits), signal, tuple(reads), tuple(writes), weight_elems, layer)
        )

    def encode(self, max_waits: int = 2, kinds: frozenset[Kind] | None = None) -> list[list[int]]:
        """The table a kernel reads: per task `kind, layer, 4 args, (counter, target) x max_waits, signal`, -1
        padded. `kinds`: only those tasks, in queue order (a part of the layer run on its own); a wait on a counter
        that none of them signals is dropped, its buffer then being the caller's input. Counter indices are kept."""
        rows = []
        kept = [t for t in self.tasks if kinds is None or t.kind in kinds]
        signalled = {t.signal for t in kept}
        for t in kept:
            if len(t.waits) > max_waits or len(t.args) > 4:
                raise ValueError(f"task {t.index} ({t.kind.name}) does not fit the table's fixed width")
            live = [w for w in t.waits if w[0] in signalled]
            waits = [x for w in live for x in w] + [-1, -1] * (max_waits - len(live))
            rows.append([int(t.kind), t.layer, *t.args, *[-1] * (4 - len(t.args)), *waits, t.signal])
        return rows


def key_range(context: int, window: int | None, split: int, splits: int) -> tuple[int, int]:
    """The keys [k0, k1) that score task `split` of `splits` computes for a sequence of `context` keys: the allowed
    keys (the last `window`, or all) divided evenly in order, with integer bounds. The kernel computes the same
    bounds from the context length it reads on the device (persistent.cuh `scores`), so the table itself never
    holds a context length: one table serves every step of a batch size, and a CUDA graph can hold it."""
    begin = context - window if window and context > window else 0
    span = context - begin
    return begin + split * span // splits, begin + (split + 1) * span // splits


def _cols(total: int, width: int) -> list[tuple[int, int]]:
    return [(c, min(c + width, total)) for c in range(0, total, width)]


def build(s: LayerShape) -> Schedule:
    """The layer's task graph in queue order."""
    return build_step(s, 1)


def _bad(s: LayerShape) -> bool:
    return bool(s.heads % s.kv_heads or s.head_dim % s.qkv_cols or s.key_splits < 1 or s.pv_slices < 1
                or s.head_dim % s.pv_slices)  # fmt: skip


def build_step(s: LayerShape, layers: int, shared: frozenset[str] = frozenset()) -> Schedule:
    """`layers` layers' task graphs in queue order, as one persistent step: layer l's q/k/v tiles wait on layer l-1's
    down tiles and read its output (`mlp`) and residual (`res2`), which the engine's next layer adds and
    normalises. With `layers` 1, one layer with unprefixed buffer names. `shared`: buffers all layers reuse (a
    kernel's one scratch tensor), written again by each layer: lab/persistent/check.py proves each rewrite waits for
    the last layer's readers."""
    if _bad(s) or layers < 1:
        raise ValueError(
            f"heads {s.heads} / kv_heads {s.kv_heads}, head_dim {s.head_dim} / qkv_cols {s.qkv_cols} and pv_slices "
            f"{s.pv_slices}, layers {layers}, key_splits {s.key_splits}"
        )
    sch = Schedule(s, layers=layers, shared=shared)
    down = None
    for layer in range(layers):
        down = _layer(sch, layer, down)
    return sch


def build_model_step(
    s: LayerShape, layers: int, vocab: int, head_cols: int, shared: frozenset[str] = frozenset()
) -> Schedule:
    """A whole decode step in queue order: the embedding of each row's token (EMBED), `layers` layers as in
    `build_step` (layer 0's q/k/v tiles wait on every row's embedding), the model's final norm of each row
    (FINAL_NORM, after the last layer's down tiles) and the LM head in tiles of `head_cols` vocabulary columns
    (HEAD, after every row's final norm; `head_cols` 0: no head, the final hidden state is the output, as the
    model's forward returns it). In: the token ids; out: the logits. The layers' shape is taken as layer
    0's (`first`: no residual before the first norm). The head's weight may be the embedding's own (Qwen3-0.6B ties
    them): one [vocab, hidden] matrix, the EMBED tasks reading a row each, the HEAD tiles all of it."""
    s = replace(s, first=True)
    if _bad(s) or layers < 1 or vocab < 1 or head_cols < 0:
        raise ValueError(f"layers {layers}, vocab {vocab}, head_cols {head_cols} (or the layer's shape: {s})")
    sch = Schedule(s, layers=layers, vocab=vocab, shared=shared)
    b, h, rows = s.batch, s.hidden, (0, s.batch)
    embedded = sch.counter("embed")
    for r in range(b):
        row = (r, r + 1)
        sch.add(Kind.EMBED, (r,), [], embedded, [Region("ids", row, (0, 1))], [Region("x", row, (0, h))], h)
    down = _layer(sch, 0, embedded)
    for layer in range(1, layers):
        down = _layer(sch, layer, down)
    last = layers - 1
    normed = sch.counter("final_norm")
    for r in range(b):
        row = (r, r + 1)
        ins = [Region(sch.name(last, "mlp"), row, (0, h)), Region(sch.name(last, "res2"), row, (0, h))]
        sch.add(Kind.FINAL_NORM, (r,), [(down, sch.expected[down])], normed, ins, [Region("final", row, (0, h))],
                layer=last)  # fmt: skip
    if not head_cols:
        return sch
    head = sch.counter("head")
    for cols in _cols(vocab, head_cols):
        sch.add(Kind.HEAD, cols, [(normed, b)], head, [Region("final", rows, (0, h))], [Region("logits", rows, cols)],
                (cols[1] - cols[0]) * h, last)  # fmt: skip
    return sch


def _layer(sch: Schedule, layer: int, before: int | None) -> int:
    """Append one layer's tasks; `before` is the counter its input waits on (the previous layer's down tiles, or a
    model step's embeddings; None: the input is written before the table starts). Returns this layer's down
    counter."""
    s, b = sch.shape, sch.shape.batch
    d, h, g = s.head_dim, s.hidden, s.group
    all_rows = (0, b)
    prefix = "" if sch.layers == 1 else f"L{layer}."

    def reg(buf: str, cols: tuple[int, int], rows: tuple[int, int] = all_rows) -> Region:
        return Region(sch.name(layer, buf), rows, cols)

    def counter(name: str) -> int:
        return sch.counter(prefix + name)

    def add(kind: Kind, args: tuple[int, ...], waits, signal: int, reads, writes, weight_elems: int = 0) -> None:
        sch.add(kind, args, waits, signal, reads, writes, weight_elems, layer)

    # the layer's input: the step's x (and residual), or the last layer's output and residual sum
    if layer == 0:
        ins = [reg("x", (0, h))] + ([] if s.first else [reg("residual", (0, h))])
    else:
        ins = [Region(sch.name(layer - 1, buf), all_rows, (0, h)) for buf in ("mlp", "res2")]
    start = [] if before is None else [(before, sch.expected[before])]
    qkv = [counter(f"qkv[{kv}]") for kv in range(s.kv_heads)]
    for kv in range(s.kv_heads):  # a group's tiles together, so its scores can start while the next group's stream
        parts = [(0, "q", hd * d) for hd in range(kv * g, (kv + 1) * g)] + [(1, "k", kv * d), (2, "v", kv * d)]
        for part, buf, base in parts:
            for c0, c1 in _cols(d, s.qkv_cols):
                cols = (base + c0, base + c1)
                first = (kv, part, base, c0) == (0, 0, 0, 0)  # the layer's first tile also writes the sum o_proj adds
                writes = [reg(buf, cols)] + ([reg("res1", (0, h))] if first else [])
                add(Kind.QKV, (part, *cols), start, qkv[kv], ins, writes, (c1 - c0) * h)

    chunks = {}
    for seq in range(b):
        for kv in range(s.kv_heads):
            chunks[seq, kv] = counter(f"scores[{seq},{kv}]")
            heads = (seq * s.heads + kv * g, seq * s.heads + (kv + 1) * g)
            qc, kc, row = (kv * g * d, (kv + 1) * g * d), (kv * d, (kv + 1) * d), (seq, seq + 1)
            for split in range(s.key_splits):
                k0, k1 = s.key_range(seq, split)
                last = split == s.key_splits - 1  # holds the newest key: it rotates k and stores K and V
                reads = [reg("q", qc, row)] + ([reg("k", kc, row), reg("v", kc, row)] if last else [])
                writes = [reg("scores", (k0, k1), heads)]
                if last:
                    writes += [reg("q_rot", qc, row), reg("k_new", kc, row), reg("v_new", kc, row)]
                add(Kind.SCORES, (seq, kv, split, s.key_splits), [(qkv[kv], sch.expected[qkv[kv]])],
                    chunks[seq, kv], reads, writes)  # fmt: skip
    attn = counter("attn")
    width = d // s.pv_slices
    for seq, n in enumerate(s.context_lens):
        for kv in range(s.kv_heads):
            heads = (seq * s.heads + kv * g, seq * s.heads + (kv + 1) * g)
            row, kc = (seq, seq + 1), (kv * d, (kv + 1) * d)
            allowed = (s.key_range(seq, 0)[0], n)
            for part in range(s.pv_slices):  # every slice reads all the logits (its softmax): they stay logits
                slices = [(hd * d + part * width, hd * d + (part + 1) * width) for hd in range(kv * g, (kv + 1) * g)]
                if s.pv_slices == 1:  # whole heads: one region of the group's columns
                    slices = [(slices[0][0], slices[-1][1])]
                add(Kind.ATTN_OUT, (seq, kv, part, s.pv_slices), [(chunks[seq, kv], s.key_splits)], attn,
                        [reg("scores", allowed, heads), reg("v_new", kc, row)],
                        [reg("attn", c, row) for c in slices])  # fmt: skip

    o_done = counter("o_proj")
    for cols in _cols(h, s.o_cols):
        add(Kind.O_PROJ, cols, [(attn, b * s.kv_heads * s.pv_slices)], o_done,
                [reg("attn", (0, s.heads * d)), reg("res1", cols)], [reg("res2", cols)],
                (cols[1] - cols[0]) * s.heads * d)  # fmt: skip
    gu = counter("gate_up")
    n_o = sch.expected[o_done]
    for cols in _cols(s.intermediate, s.gu_cols):
        add(Kind.GATE_UP, cols, [(o_done, n_o)], gu, [reg("res2", (0, h))], [reg("act", cols)],
                2 * (cols[1] - cols[0]) * h)  # fmt: skip
    down = counter("down")
    n_gu = sch.expected[gu]
    for cols in _cols(h, s.down_cols):
        add(Kind.DOWN, cols, [(gu, n_gu)], down, [reg("act", (0, s.intermediate)), reg("res2", cols)],
                [reg("mlp", cols), reg("out", cols)], (cols[1] - cols[0]) * s.intermediate)  # fmt: skip
    return down


def inputs(s: LayerShape) -> set[str]:
    """The buffers written before the layer starts (by the previous layer or the embedding)."""
    return {"x"} if s.first else {"x", "residual"}
