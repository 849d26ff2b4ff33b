"""Binding for the persistent decode layer (persistent.cu): one launch of SM-count blocks runs a Qwen3 layer's task
table (`persistent_schedule.Schedule.encode`): every kind (`BUILT`), the whole layer in one launch, or a part of it
(`Schedule.encode(kinds=...)`) with the buffers the part does not write as inputs.

`run` is the checked call (it reads the error word, a synchronisation); `launch` is the decode step's (no host read:
the table is cached per shape, which holds no context length, so a CUDA graph can hold the launch). The kernel
table's `decode_layer` op takes it under VT_PERSISTENT_LAYER (engine/kernels/layer.py), default OFF."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, fields
from functools import cache

import torch

from engine.cuda import build, ffi, persistent_schedule
from engine.cuda import norm as cuda_norm
from engine.cuda.persistent_schedule import Kind, LayerShape, Schedule

_P = ctypes.c_void_p
_I = ctypes.c_int
_F = ctypes.c_float

ROW_WIDTH = 11  # kRowWidth: kind, layer, 4 args, (counter, target) x 2, signal
MAX_WAITS = 2  # kMaxWaits
CONTROL_WORDS = 2  # kControlWords: the error word and the queue head before the counters
ERROR, HEAD = 0, 1  # the control words' places; the launcher zeroes the head and counters, never the error word
_FAULTS = {1: "a kind this kernel does not run", 2: "a wait that timed out at task", 3: "a layer outside the launch at "
           "task", 4: "a token id outside the vocabulary at row"}  # fmt: skip
ROWS_PER_PASS = 8  # kRowsPerPass: rows of x a GEMV tile stages at once
WARPS = 8  # kWarps: a block's warps (ATTN_OUT's P.V partial sums, one row of head_dim floats each)
PV_HEADS, PV_CHUNK = 4, 1024  # kPvHeads, kPvChunk: a P.V pass's heads and the keys of its probabilities in smem
TABLE_INTS = PV_CHUNK + 4  # kTableInts: a chunk's block-table entries, padded to 16 bytes
VECTOR = 8  # every width a multiple of 16 bytes of 2-byte elements
# the kernel's switch: a kind given a case there is added here (a test holds the two together)
BUILT = frozenset(Kind)
MAX_LAYERS = 64  # kMaxLayers: a step's layers in one launch
TRACE = ("sm", "taken", "met", "staged", "signalled")  # kTraceWidth: a traced task's SM and global-timer times (ns)
# when a block takes its next task from the queue (persistent.cuh `Take`): once its current task's waits are met
# (the row read and the task's weights prefetched before the run), the atomic issued then and read after the run, or
# once the current task signalled. Each is the same sums; the step's trace times them (`--take`): async was the
# fastest on an H100 (the ENGINE-PERSISTENT spec, "Fourth GPU run").
TAKES = {"at-run": 0, "async": 1, "after-signal": 2}
TAKE = "async"
SHARED = frozenset({"scores"})  # the scratch a step's layers reuse: one [rows x heads, capacity] fp32 tensor
# The tiles, about one wave of 132 SMs per phase at b1 for Qwen3-0.6B (lab/persistent/model.py `qwen3_0_6b`: q/k/v
# 128 tiles, o_proj and down 128, gate/up 96); to be tuned on the device. Per (sequence, KV head): key_splits score
# tasks, pv_slices P.V tasks (8 x 4 = 32 at b1).
TILES: dict[str, int] = dict(qkv_cols=32, o_cols=8, gu_cols=32, down_cols=8, key_splits=4, pv_slices=4)
WAVE, MAX_KEY_SPLITS, MAX_PV_SLICES = 128, 16, 8  # the decode step's attention tiles (`attention_tiles`)
MAX_HEAD_DIM = 32 * VECTOR  # a K row's lanes (16 bytes each) divide a warp: head_dim 8 x a power of two
DTYPES = (torch.bfloat16, torch.float16)

SIGNATURES: dict[str, list] = {  # launcher -> argtypes (a test holds them to persistent.cu)
    "vt_persistent_row_width": [],
    "vt_persistent_control_words": [],
    "vt_persistent_smem_bytes": [_I, _I, _I, _I, _I, _I, _I],
    "vt_persistent_step": [_P, _I, _P, _I, _P, _P, _I, _P, _I, *[_I] * 10, *[_F] * 5, _I, _I, _P],
    "vt_persistent_max_layers": [],
    "vt_persistent_trace_width": [],
}


@dataclass
class LayerTensors:
    """One layer's buffers and weights, in persistent.cuh `Layer`'s pointer order (the launcher reads them as an
    array). Buffers are [batch, width] contiguous, weights [out, in] contiguous, all in one dtype."""

    x: torch.Tensor  # [b, hidden]: the layer's input (the embedding at layer 0)
    residual: torch.Tensor | None  # [b, hidden]: the running sum before x; None at layer 0 (res1 = x)
    res1: torch.Tensor  # [b, hidden]: x + residual (the layer's first q/k/v tile writes it)
    q: torch.Tensor  # [b, heads * head_dim]
    k: torch.Tensor  # [b, kv_heads * head_dim]
    v: torch.Tensor  # [b, kv_heads * head_dim]
    attn: torch.Tensor  # [b, heads * head_dim]: attention's output (an input to a part without ATTN_OUT)
    res2: torch.Tensor  # [b, hidden]: o_proj + res1
    act: torch.Tensor  # [b, intermediate]: SiLU(gate) * up
    mlp: torch.Tensor  # [b, hidden]: down_proj's output (the layer's output)
    out: torch.Tensor  # [b, hidden]: mlp + res2 (the next layer's residual sum)
    ln1: torch.Tensor  # [hidden]
    ln2: torch.Tensor  # [hidden]
    wq: torch.Tensor  # [heads * head_dim, hidden]
    wk: torch.Tensor  # [kv_heads * head_dim, hidden]
    wv: torch.Tensor  # [kv_heads * head_dim, hidden]
    wo: torch.Tensor  # [hidden, heads * head_dim]
    wg: torch.Tensor  # [intermediate, hidden]
    wu: torch.Tensor  # [intermediate, hidden]
    wd: torch.Tensor  # [hidden, intermediate]
    q_rot: torch.Tensor  # [b, heads * head_dim]: q after q_norm and RoPE
    k_rot: torch.Tensor  # [b, kv_heads * head_dim]: k after k_norm and RoPE
    k_cache: torch.Tensor  # [blocks, block_size, kv_heads, head_dim]: this step's slots written
    v_cache: torch.Tensor
    slots: torch.Tensor  # [b] int64: each row's cache slot (-1: none)
    cos: torch.Tensor  # [b, head_dim]
    sin: torch.Tensor
    q_norm: torch.Tensor  # [head_dim]
    k_norm: torch.Tensor
    block_tables: torch.Tensor  # [b, max_blocks] int32
    context_lens: torch.Tensor  # [b] int32, this step's token included
    scores: torch.Tensor  # [b * heads, >= max context] fp32 scratch: the logits, then the probabilities

    def tensors(self) -> list[torch.Tensor | None]:
        return [getattr(self, f.name) for f in fields(self)]


POINTERS = tuple(f.name for f in fields(LayerTensors))  # 32, persistent.cu kPointers


@dataclass
class ModelTensors:
    """A whole step's ends, in persistent.cuh `Model`'s pointer order: the EMBED, FINAL_NORM and HEAD tasks'."""

    ids: torch.Tensor  # [b] int64: each row's token
    embed: torch.Tensor  # [vocab, hidden]
    final_norm: torch.Tensor  # [hidden]: the model's norm
    head: torch.Tensor | None  # [vocab, hidden]: the LM head (the embedding itself when tied); None: no HEAD tasks
    final: torch.Tensor  # [b, hidden]: the final norm's output
    logits: torch.Tensor | None  # [b, vocab]; None with the head

    def tensors(self) -> list[torch.Tensor | None]:
        return [getattr(self, f.name) for f in fields(self)]


MODEL_POINTERS = tuple(f.name for f in fields(ModelTensors))  # 6, persistent.cu kModelPointers
WEIGHTS = ("ln1", "ln2", "wq", "wk", "wv", "wo", "wg", "wu", "wd", "q_norm", "k_norm")  # a layer's, by field


def tensors(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    weights: dict[str, torch.Tensor],  # WEIGHTS
    caches: tuple[torch.Tensor, torch.Tensor],
    slots: torch.Tensor,
    cos_sin: tuple[torch.Tensor, torch.Tensor],
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    heads: int,
    scores_width: int,  # at least the longest context: the tables' capacity, for a graph that replays as they grow
    fill: float | None = None,  # None: outputs and scratch uninitialised; NaN: a test's poison
    scores: torch.Tensor | None = None,  # a scores scratch to use (a step's layers share one) instead of a new one
) -> LayerTensors:
    """A layer's `LayerTensors`: the step's inputs and the layer's weights as given, the outputs and scratch made."""
    b, h = x.shape

    def new(rows: int, width: int, dtype: torch.dtype = x.dtype) -> torch.Tensor:
        if fill is None:
            return torch.empty(rows, width, dtype=dtype, device=x.device)
        return torch.full((rows, width), fill, dtype=dtype, device=x.device)

    qd, kvd, inter = weights["wq"].shape[0], weights["wk"].shape[0], weights["wg"].shape[0]
    return LayerTensors(
        x=x, residual=residual, res1=new(b, h), q=new(b, qd), k=new(b, kvd), v=new(b, kvd),
        attn=new(b, qd), res2=new(b, h), act=new(b, inter), mlp=new(b, h), out=new(b, h),
        q_rot=new(b, qd), k_rot=new(b, kvd), k_cache=caches[0], v_cache=caches[1], slots=slots, cos=cos_sin[0],
        sin=cos_sin[1], block_tables=block_tables, context_lens=context_lens,
        scores=new(b * heads, scores_width, torch.float32) if scores is None else scores,
        **{name: weights[name] for name in WEIGHTS},
    )  # fmt: skip


def step_tensors(
    x: torch.Tensor,
    weights: list[dict[str, torch.Tensor]],  # one `WEIGHTS` dict a layer
    caches: list[tuple[torch.Tensor, torch.Tensor]],  # one (K, V) a layer
    slots: torch.Tensor,
    cos_sin: tuple[torch.Tensor, torch.Tensor],
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    heads: int,
    scores_width: int,
    fill: float | None = None,
    scores: torch.Tensor | None = None,
) -> list[LayerTensors]:
    """A step's layers' `tensors`, chained as one launch reads them: layer 0 takes `x` with no residual, layer i
    layer i-1's mlp and res2."""
    layers: list[LayerTensors] = []
    residual = None
    for w, kv in zip(weights, caches, strict=True):
        t = tensors(x, residual, w, kv, slots, cos_sin, block_tables, context_lens, heads, scores_width, fill, scores)
        layers.append(t)
        x, residual = t.mlp, t.res2
    return layers


_DTYPES = {"slots": torch.int64, "block_tables": torch.int32, "context_lens": torch.int32, "scores": torch.float32}


@cache
def _lib() -> ctypes.CDLL:
    lib = build.load("persistent.cu")
    for name, argtypes in SIGNATURES.items():
        ffi.bind(lib, name, argtypes)
    return lib


def smem_bytes(batch: int, hidden: int, heads: int, kv_heads: int, head_dim: int, inter: int, elt: int) -> int:
    """persistent.cu `vt_persistent_smem_bytes`: the staged rows of the widest GEMV input (and a norm's weight after
    a normed tile's rows), at least a KV group's q heads in fp32, its staged q, k and v heads, rotated q heads, the
    q/k norms' weights, cos and sin (SCORES), and a P.V pass's probabilities and warps' sums (ATTN_OUT), each
    attention kind with a chunk's block-table entries."""
    rows = min(batch, ROWS_PER_PASS)
    gemv = max(rows * max(hidden, heads * head_dim, inter), (rows + 1) * hidden) * elt
    g = heads // kv_heads
    table = TABLE_INTS * 4
    score = g * head_dim * 4 + table + (2 * g + 6) * head_dim * elt
    return max(gemv, score, PV_HEADS * (PV_CHUNK + WARPS * head_dim) * 4 + table)


def refusal(sch: Schedule, kinds: frozenset[Kind], dtype: torch.dtype) -> str | None:
    """Why this kernel cannot run `kinds` of `sch` in `dtype` (None: it can)."""
    s = sch.shape
    if dtype not in DTYPES:
        return f"dtype {dtype} (bf16 and fp16 only)"
    if not kinds <= BUILT:
        return f"kinds {sorted(k.name for k in kinds - BUILT)} are not built (built: {sorted(k.name for k in BUILT)})"
    if sch.layers > MAX_LAYERS:
        return f"{sch.layers} layers (at most {MAX_LAYERS} a launch)"
    widths = {"hidden": s.hidden, "head_dim": s.head_dim, "intermediate": s.intermediate}
    odd = [f"{k} {v}" for k, v in widths.items() if v % VECTOR]
    if odd:
        return f"{', '.join(odd)} not a multiple of {VECTOR}"
    lanes = s.head_dim // VECTOR
    if s.head_dim > MAX_HEAD_DIM or lanes & (lanes - 1):
        return f"head_dim {s.head_dim} (8 x a power of two, at most {MAX_HEAD_DIM})"
    width = s.head_dim // s.pv_slices
    if s.head_dim % s.pv_slices or width % VECTOR or (width // VECTOR) & (width // VECTOR - 1):
        return f"pv_slices {s.pv_slices}: head_dim {s.head_dim} / pv_slices must be 8 x a power of two"
    return None


def table(sch: Schedule, kinds: frozenset[Kind], device: torch.device) -> torch.Tensor:
    """The encoded table of `kinds`' tasks, [tasks, ROW_WIDTH] int32 on `device`."""
    rows = sch.encode(MAX_WAITS, kinds)
    return torch.tensor(rows, dtype=torch.int32, device=device).reshape(len(rows), ROW_WIDTH)


def decode_shape(
    batch: int, hidden: int, heads: int, kv_heads: int, head_dim: int, inter: int, first: bool, window: int | None
) -> LayerShape:
    """The shape a decode step's table is built from: `TILES` with the attention's tasks per (sequence, KV head)
    scaled to about a wave (`attention_tiles`), and every context length 1, standing for the run-time lengths (the
    encoded table does not depend on them: `persistent_schedule.key_range`)."""
    tiles = TILES | attention_tiles(batch, kv_heads, head_dim)
    return LayerShape(hidden, heads, kv_heads, head_dim, inter, (1,) * batch, first, window=window, **tiles)


def attention_tiles(batch: int, kv_heads: int, head_dim: int) -> dict[str, int]:
    """Score splits and P.V slices per (sequence, KV head) so a phase's tasks fill about `WAVE` blocks: at b1 with 8
    KV heads, 16 splits and 8 slices (the first H100 trace: 4 of each left the phases at 18-20 us, latency-bound on
    32 blocks); at b32 one of each. Slices stay 8 x a power of two wide (every slice recomputes its softmax, so more
    of them cost L2 reads)."""
    per = max(1, WAVE // (batch * kv_heads))
    slices = 1
    while slices * 2 <= min(per, MAX_PV_SLICES) and head_dim % (slices * 2 * VECTOR) == 0:
        slices *= 2
    return {"key_splits": min(per, MAX_KEY_SPLITS), "pv_slices": slices}


@cache
def schedule_for(shape: LayerShape, layers: int = 1, vocab: int = 0) -> Schedule:
    """One layer's table, or (`vocab`) a model's: the embedding, `layers` layers and the final norm, no head, the
    layers sharing one scores scratch (`launch_model`'s callers pass one tensor; lab/persistent/check.py proves it)."""
    if vocab:
        return persistent_schedule.build_model_step(shape, layers, vocab, 0, SHARED)
    return persistent_schedule.build(shape)


@cache
def _table(shape: LayerShape, layers: int, vocab: int, device: torch.device) -> torch.Tensor:
    """Kept for the process: a captured graph's launch reads it at every replay."""
    return table(schedule_for(shape, layers, vocab), BUILT, device)


# each tensor's shape by width names: rows of the batch, a weight's [out, in], a vector
_ROWS = {"x": "h", "residual": "h", "res1": "h", "q": "q", "k": "kv", "v": "kv", "attn": "q", "res2": "h", "act": "i",
         "mlp": "h", "out": "h", "q_rot": "q", "k_rot": "kv", "cos": "d", "sin": "d"}  # fmt: skip
_WEIGHTS = {"wq": "q h", "wk": "kv h", "wv": "kv h", "wo": "h q", "wg": "i h", "wu": "i h", "wd": "h i", "ln1": "h",
            "ln2": "h", "q_norm": "d", "k_norm": "d"}  # fmt: skip


def check_layer(t: LayerTensors, sch: Schedule, first: bool) -> None:
    s, b = sch.shape, sch.shape.batch
    w = {"h": s.hidden, "q": s.heads * s.head_dim, "kv": s.kv_heads * s.head_dim, "i": s.intermediate, "d": s.head_dim}
    cache = (t.k_cache.shape[0], t.k_cache.shape[1], s.kv_heads, s.head_dim) if t.k_cache.dim() == 4 else (-1,)
    sizes: dict[str, tuple[int, ...]] = {name: (b, w[width]) for name, width in _ROWS.items()}
    sizes |= {name: tuple(w[x] for x in widths.split()) for name, widths in _WEIGHTS.items()}
    sizes |= {"k_cache": cache, "v_cache": cache, "slots": (b,), "context_lens": (b,)}
    sizes |= {"block_tables": (b, t.block_tables.shape[-1])}
    sizes |= {"scores": (b * s.heads, max(max(s.context_lens), t.scores.shape[-1]))}
    if (t.residual is None) != first:
        raise ValueError(f"residual: {'given at layer 0' if first else 'missing past layer 0'}")
    for name in POINTERS:
        x = getattr(t, name)
        if x is None:
            continue
        dtype = _DTYPES.get(name, t.x.dtype)
        if tuple(x.shape) != sizes[name] or x.dtype != dtype or not x.is_cuda or not x.is_contiguous():
            raise ValueError(
                f"{name}: expected a contiguous CUDA {dtype} tensor of {sizes[name]}, got {tuple(x.shape)} "
                f"{x.dtype} on {x.device}"
            )
        if x.data_ptr() % (x.element_size() if name in _DTYPES else 16):
            raise ValueError(f"{name}: not 16-byte aligned")


def run(
    sch: Schedule, kinds: frozenset[Kind], t: LayerTensors, eps: float, scale: float, window: int | None = None
) -> torch.Tensor:
    """Run `kinds` of `sch` (one layer) in one persistent launch on x's stream; returns the control words (the error
    word, the queue head, then the counters) for the caller to inspect. `eps` is the norms' (q/k norms too), `scale` and
    `window` the attention's (None: the full context). Raises on a refusal or a nonzero error word (which
    synchronises: a test harness's call, not a decode step's)."""
    return run_step(sch, kinds, [t], eps, scale, window)


def run_step(
    sch: Schedule,
    kinds: frozenset[Kind],
    layers: list[LayerTensors],
    eps: float,
    scale: float,
    window: int | None = None,
    model: ModelTensors | None = None,
    trace: torch.Tensor | None = None,
    take: str = TAKE,
) -> torch.Tensor:
    """`run` for a table of several layers (`build_step`, or `build_model_step` with `model`, its ends) in one launch:
    one `LayerTensors` a layer, a later layer's x and residual being the previous layer's mlp and res2. `trace`: a
    CUDA int64 [tasks, len(TRACE)] tensor each task's block fills (`TRACE`; lab/persistent/trace.py); `take`: when a
    block takes its next task (`TAKES`)."""
    device = layers[0].x.device
    control = torch.zeros(CONTROL_WORDS + len(sch.counters), dtype=torch.int32, device=device)
    tab = table(sch, kinds, device)
    if trace is not None and (trace.shape != (tab.shape[0], len(TRACE)) or trace.dtype != torch.int64
                              or not trace.is_cuda or not trace.is_contiguous()):  # fmt: skip
        raise ValueError(f"trace: expected a contiguous CUDA int64 tensor of {(tab.shape[0], len(TRACE))}")
    _launch(sch, kinds, layers, model, eps, scale, window, tab, control, trace, take)
    error = int(control[ERROR].item())
    if error:
        raise RuntimeError(f"persistent layer: error word {error:#x}: {describe(error)}")
    return control


def describe(word: int) -> str:
    """An error word in words: what failed first, and where."""
    return f"{_FAULTS.get(word >> 20, 'an unknown fault')} {word & ((1 << 20) - 1)}"


_CONTROLS: dict[tuple[LayerShape, int, int, torch.device], torch.Tensor] = {}


def control_words(shape: LayerShape, layers: int, vocab: int, device: torch.device) -> torch.Tensor:
    key = (shape, layers, vocab, device)
    if key not in _CONTROLS:  # made by the runner's warm-up, before a capture records the launch
        counters = len(schedule_for(shape, layers, vocab).counters)
        with torch.inference_mode(False):  # a normal tensor: `faults` clears its error word outside inference mode
            _CONTROLS[key] = torch.zeros(CONTROL_WORDS + counters, dtype=torch.int32, device=device)
    return _CONTROLS[key]


def launch(shape: LayerShape, t: LayerTensors, eps: float, scale: float) -> torch.Tensor:
    """The whole layer of `shape` (a `decode_shape`) in one launch on x's stream, its table built once per shape and
    device; no host read, so a CUDA graph can capture it. The control words are kept per shape and device, so their
    error word holds the first fault of any launch since `faults` last read it (a broken wait ends the launch with
    wrong values rather than hanging it; the decode step reads the word once its tokens are back)."""
    control, tab = control_words(shape, 1, 0, t.x.device), _table(shape, 1, 0, t.x.device)
    _launch(schedule_for(shape, 1, 0), BUILT, [t], None, eps, scale, shape.window, tab, control)
    return control


def launch_model(
    shape: LayerShape,
    vocab: int,
    layers: list[LayerTensors],
    model: ModelTensors,
    eps: float,
    scale: float,
    take: str = TAKE,
) -> torch.Tensor:
    """A model's decode step up to its final norm (EMBED, every layer, FINAL_NORM: `model.final`) in one launch, as
    `launch` does a layer: the table and control words kept per (shape, layers, vocab, device), nothing read back."""
    device, n = model.final.device, len(layers)
    control, tab = control_words(shape, n, vocab, device), _table(shape, n, vocab, device)
    _launch(schedule_for(shape, n, vocab), BUILT, layers, model, eps, scale, shape.window, tab, control, None, take)
    return control


def faults() -> list[str]:
    """The faults recorded by the decode step's launches since the last call, one line each, and their error words
    cleared. It reads the words back (a synchronisation): the runner calls it once a step's tokens are on the host,
    and only after a launch was made."""
    found = []
    for (shape, layers, vocab, device), control in _CONTROLS.items():
        word = int(control[ERROR].item())
        if word:
            what = "layer" if not vocab else f"step of {layers} layers"
            found.append(f"persistent {what} (batch {shape.batch} on {device}): {describe(word)}")
            control[ERROR] = 0
    return found


MODEL_KINDS = frozenset({Kind.EMBED, Kind.FINAL_NORM, Kind.HEAD})


def _ptr(x: torch.Tensor | None) -> int:
    return 0 if x is None else x.data_ptr()


def check_step(sch: Schedule, kinds: frozenset[Kind], layers: list[LayerTensors], model: ModelTensors | None) -> None:
    if len(layers) != sch.layers:
        raise ValueError(f"{len(layers)} layers' tensors for a table of {sch.layers}")
    for i, t in enumerate(layers):
        check_layer(t, sch, sch.shape.first and i == 0)
        prev = layers[i - 1] if i else None
        if prev is not None and (t.x.data_ptr(), _ptr(t.residual)) != (prev.mlp.data_ptr(), prev.res2.data_ptr()):
            raise ValueError(f"layer {i}: its x and residual must be layer {i - 1}'s mlp and res2")
    widths = {(t.k_cache.shape[1], t.block_tables.shape[1], t.scores.shape[1]) for t in layers}
    if len(widths) > 1:  # the launch takes them once, for every layer
        raise ValueError(f"layers differ in (block size, table width, scores width): {sorted(widths)}")
    kinds = kinds & {t.kind for t in sch.tasks}  # the kinds this launch runs
    if (model is not None) != bool(kinds & MODEL_KINDS):
        raise ValueError("model tensors: " + ("given without a model kind" if model is not None else "missing"))
    if model is None:
        return
    b, h, v, x = sch.shape.batch, sch.shape.hidden, sch.vocab, layers[0].x
    sizes = {"ids": (b,), "embed": (v, h), "final_norm": (h,), "head": (v, h), "final": (b, h), "logits": (b, v)}
    if (model.head is None) != (Kind.HEAD not in kinds) or (model.head is None) != (model.logits is None):
        raise ValueError("model tensors: head and logits are given exactly when the table's HEAD tasks run")
    for name in MODEL_POINTERS:
        got, dtype = getattr(model, name), torch.int64 if name == "ids" else x.dtype
        if got is None:
            continue
        if tuple(got.shape) != sizes[name] or got.dtype != dtype or not got.is_cuda or not got.is_contiguous():
            raise ValueError(
                f"{name}: expected a contiguous CUDA {dtype} tensor of {sizes[name]}, got {tuple(got.shape)} "
                f"{got.dtype} on {got.device}"
            )


def _launch(
    sch: Schedule,
    kinds: frozenset[Kind],
    layers: list[LayerTensors],
    model: ModelTensors | None,
    eps: float,
    scale: float,
    window: int | None,
    tab: torch.Tensor,
    control: torch.Tensor,
    trace: torch.Tensor | None = None,
    take: str = TAKE,
) -> None:
    if take not in TAKES:
        raise ValueError(f"take {take!r}: one of {', '.join(TAKES)}")
    t = layers[0]
    why = refusal(sch, kinds, t.x.dtype)
    if why is not None:
        raise ValueError(f"persistent layer: {why}")
    check_step(sch, kinds, layers, model)
    device = t.x.device
    s = sch.shape
    ptrs = (_P * (len(POINTERS) * len(layers)))(*ffi.ptrs(*[x for layer in layers for x in layer.tensors()]))
    mptrs = None if model is None else (_P * len(MODEL_POINTERS))(*ffi.ptrs(*model.tensors()))
    lib = _lib()
    rc = lib.vt_persistent_step(
        *ffi.ptrs(tab),
        tab.shape[0],
        *ffi.ptrs(control),
        len(sch.counters),
        None if trace is None else trace.data_ptr(),
        ctypes.cast(ptrs, _P),
        len(layers),
        None if mptrs is None else ctypes.cast(mptrs, _P),
        sch.vocab,
        s.batch,
        s.hidden,
        s.heads,
        s.kv_heads,
        s.head_dim,
        s.intermediate,
        t.k_cache.shape[1],
        t.block_tables.shape[1],
        t.scores.shape[1],
        window or 0,
        cuda_norm.mean_scale(s.batch, s.hidden),
        cuda_norm.mean_scale(s.batch * s.heads, s.head_dim),  # the rope binding's q_norm factor
        cuda_norm.mean_scale(s.batch * s.kv_heads, s.head_dim),
        eps,
        scale,
        TAKES[take],
        ffi.dtype_code(t.x, "x"),
        ffi.stream(device),
    )
    ffi.check(rc, "vt_persistent_step", lib, "persistent")
