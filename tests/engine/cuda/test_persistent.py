"""The persistent decode layer (engine/cuda/persistent.cu) reading the schedule's table
(engine/cuda/persistent_schedule.py). CPU: the binding's signatures, constants and refusals against the source and
real nvcc; the encoded table as the kernel reads it. GPU (skipped here): the whole layer in one launch, and its two
halves with an input in between, on Qwen3-0.6B's layer shapes at b1, b8 and b32 against today's chain (the engine's
Qwen3DecoderLayer through the kernel table): q/k after RoPE, the K/V cache, attention's output, the residuals and the
layer's output."""

from __future__ import annotations

import ctypes
import re
from dataclasses import replace

import pytest
import torch

from engine import kernels
from engine.cuda import build, persistent
from engine.cuda.persistent_schedule import Kind, LayerShape, build_model_step
from engine.cuda.persistent_schedule import build as build_schedule
from engine.flags import FlagSnapshot
from engine.kernels.layer import persistent_weights
from engine.model.batch import ForwardBatch
from engine.ops.rope import rope_cos_sin
from lab.gates.numerics import STACK_LAYERS, TOLERANCES, compare
from lab.persistent import case as C
from lab.persistent import trace as T
from lab.persistent.check import check
from lab.persistent.sim import CHAIN_FLAGS
from tests.engine.cuda.signatures import exported

FAMILY = "persistent"  # the conftest's `cuda` and `compiled` fixtures read these
KERNELS = "the persistent decode layer"
FRONT = frozenset({Kind.QKV, Kind.SCORES})  # the layer's input to the rotated q and k, the K/V cache and the logits
BACK = frozenset({Kind.O_PROJ, Kind.GATE_UP, Kind.DOWN})  # attention's output to the layer's output
TILES = persistent.TILES  # the arm's tiles
# Qwen3-0.6B's layer: hidden 1024, 16 heads, 8 KV heads, head_dim 128, intermediate 3072
QWEN = LayerShape(1024, 16, 8, 128, 3072, (1024,), **TILES)
STACK = TOLERANCES[f"bf16-stack{STACK_LAYERS}"]  # a three-layer model's final hidden state


def test_binding_argtypes_match_the_launchers():
    launchers = exported(build.CUDA_DIR / "persistent.cu")
    assert set(persistent.SIGNATURES) == set(launchers) - {"vt_persistent_last_error"}
    for name, argtypes in persistent.SIGNATURES.items():
        assert argtypes == launchers[name], name


def test_the_source_is_in_the_feature_table():
    assert build.load_table().sources["persistent.cu"] == "portable"


def test_the_binding_constants_are_the_kernels(compiled):
    for name in ("vt_persistent_row_width", "vt_persistent_control_words", "vt_persistent_trace_width"):
        getattr(compiled, name).restype = ctypes.c_int
    assert compiled.vt_persistent_row_width() == persistent.ROW_WIDTH == len(qwen_table()[0])
    assert compiled.vt_persistent_control_words() == persistent.CONTROL_WORDS
    assert compiled.vt_persistent_trace_width() == len(persistent.TRACE)
    smem = compiled.vt_persistent_smem_bytes
    smem.restype = ctypes.c_longlong
    for batch, heads, kv, d in ((1, 16, 8, 128), (8, 16, 8, 128), (32, 16, 8, 128), (1, 64, 1, 64)):
        got = smem(batch, 1024, heads, kv, d, 3072, 2)
        assert got == persistent.smem_bytes(batch, 1024, heads, kv, d, 3072, 2), (batch, heads, kv, d)
    table = 1028 * 4  # a chunk's block-table entries, padded to 16 bytes
    assert (
        persistent.smem_bytes(1, 1024, 16, 8, 128, 3072, 2) == 4 * (1024 + 8 * 128) * 4 + table
    )  # b1: a P.V pass's, with a chunk's block-table entries
    assert persistent.smem_bytes(32, 1024, 16, 8, 128, 3072, 2) == 49152  # b8 and up: 8 rows of K 3072
    assert (
        persistent.smem_bytes(1, 1024, 128, 1, 128, 3072, 2) == 128 * 128 * 4 + table + (2 * 128 + 6) * 128 * 2
    )  # 128 q heads outgrow it: in fp32, staged with k, v, the norms' weights, cos and sin, and rotated
    assert (
        persistent.smem_bytes(1, 1024, 64, 1, 64, 3072, 2) == 64 * 64 * 4 + table + (2 * 64 + 6) * 64 * 2
    )  # d64 with 64 q heads a group: the score split's staging


def test_launcher_refuses_what_it_cannot_take(compiled):
    fn = compiled.vt_persistent_step
    fn.argtypes = persistent.SIGNATURES["vt_persistent_step"]
    err = compiled.vt_persistent_last_error
    err.restype = ctypes.c_char_p
    compiled.vt_persistent_max_layers.restype = ctypes.c_int
    assert compiled.vt_persistent_max_layers() == persistent.MAX_LAYERS
    good = [ctypes.c_void_p(256)] * len(persistent.POINTERS)  # never dereferenced: refusals come before any launch
    arr = (ctypes.c_void_p * len(good))(*good)
    two = (ctypes.c_void_p * (2 * len(good)))(*good, *good[:2], None, *good[3:])  # layer 1 without its res1
    model = (ctypes.c_void_p * len(persistent.MODEL_POINTERS))(*[ctypes.c_void_p(512)] * 6)

    def call(tasks=10, counters=5, hidden=1024, head_dim=128, block_size=16, dtype=1, ptrs=arr, layers=1, m=None,
             vocab=0, trace=None, take=0):  # fmt: skip
        return fn(None, tasks, None, counters, trace, ctypes.cast(ptrs, ctypes.c_void_p), layers,
                  None if m is None else ctypes.cast(m, ctypes.c_void_p), vocab, 1, hidden, 16, 8, head_dim, 3072,
                  block_size, 4, 64, 0, 1.0, 1.0, 1.0, 1e-6, 0.088, take, dtype, None)  # fmt: skip

    for take in (-1, len(persistent.TAKES)):  # the binding's names are the kernel's Take, in order
        assert call(take=take) == 1000
        assert err() == b"persistent: take %d (0 at run, 1 async, 2 after the signal)" % take
    assert list(persistent.TAKES.values()) == list(range(len(persistent.TAKES)))
    assert call(dtype=0) == 1001
    assert err() == b"persistent: dtype code 0 (bf16 and fp16 only)"
    assert call(tasks=0) == 1000
    assert err() == b"persistent: tasks 0, counters 5, batch 1 must be > 0"
    assert call(hidden=1020) == 1000
    shapes = b"persistent: hidden %d, inter 3072 (multiples of 8), head_dim %d (8 x a power of two, at most 256), heads 16 / kv_heads 8"
    assert err() == shapes % (1020, 128)
    for head_dim in (512, 96):  # a K row's 16-byte lanes must divide a warp
        assert call(head_dim=head_dim) == 1000
        assert err() == shapes % (1024, head_dim)
    odd = (ctypes.c_void_p * len(good))(*good[:4], ctypes.c_void_p(258), *good[5:])
    assert call(ptrs=odd) == 1000
    assert err() == b"persistent: layer 0 pointer 4 is not 16-byte aligned"
    assert call(block_size=0) == 1000
    assert err() == b"persistent: block_size 0, max_blocks 4, ld_scores 64 must be > 0, window 0 >= 0"
    missing = (ctypes.c_void_p * len(good))(*good[:2], None, *good[3:])
    assert call(ptrs=missing) == 1000
    assert err() == b"persistent: layer 0 pointer 2 is null"
    for layers in (0, persistent.MAX_LAYERS + 1):
        assert call(layers=layers) == 1000
        assert err() == b"persistent: %d layers (1 to 64 a launch)" % layers
    assert call(ptrs=two, layers=2) == 1000
    assert err() == b"persistent: layer 1 pointer 2 is null"
    assert call(m=model, vocab=0) == 1000
    assert err() == b"persistent: vocab 0 must be > 0"
    no_head = (ctypes.c_void_p * len(model))(*model[:3], None, *model[4:])
    assert call(m=no_head, vocab=64) == 1000
    assert err() == b"persistent: model pointer 3 is null"
    assert call(trace=ctypes.c_void_p(260)) == 1000
    assert err() == b"persistent: trace is not 8-byte aligned"


def qwen_table(kinds=None):
    return build_schedule(QWEN).encode(persistent.MAX_WAITS, kinds)


def test_the_table_the_kernel_reads():
    sch = build_schedule(QWEN)
    assert check(sch) == []
    rows = qwen_table()
    assert len(rows) == len(sch.tasks)
    qkv0 = sch.counters.index("qkv[0]")
    # kind, layer, 4 args, (counter, target) x 2, signal: q head 0's first 32 columns of the input's norm, no wait
    assert rows[0] == [Kind.QKV, 0, 0, 0, 32, -1, -1, -1, -1, -1, qkv0]
    kinds = [r[0] for r in rows]
    assert kinds.count(Kind.QKV) == (2048 + 1024 + 1024) // 32
    scores = [r for r in rows if r[0] == Kind.SCORES]  # (seq, kv head, split, splits): no key bound in the table
    scores00 = sch.counters.index("scores[0,0]")  # after KV head 0's q heads', k's and v's 16 tiles
    assert scores[:2] == [[Kind.SCORES, 0, 0, 0, s, 4, qkv0, 4 * 128 // 32, -1, -1, scores00] for s in (0, 1)]
    assert len(scores) == 8 * 4
    assert kinds.count(Kind.GATE_UP) == 3072 // 32 and kinds.count(Kind.DOWN) == 1024 // 8
    attn = [r[2:6] for r in rows if r[0] == Kind.ATTN_OUT]  # (seq, kv head, slice, slices) of head_dim
    assert attn == [[0, kv, part, 4] for kv in range(8) for part in range(4)]
    for r in rows:  # every wait names a counter signalled earlier in the queue, with a reachable target
        for c, target in ((r[6], r[7]), (r[8], r[9])):
            assert (c, target) == (-1, -1) or 0 < target <= sch.expected[c]


def test_the_decode_steps_attention_tiles_fill_about_a_wave():
    """`decode_shape` scales score splits and P.V slices per (sequence, KV head) to about a wave of blocks: 16 and
    8 at b1 with 8 KV heads (128 tasks each), fewer as the batch grows, one of each at b32; slices stay 8 x a power
    of two wide; the table built from it passes the static check."""
    assert persistent.attention_tiles(1, 8, 128) == {"key_splits": 16, "pv_slices": 8}
    assert persistent.attention_tiles(8, 8, 128) == {"key_splits": 2, "pv_slices": 2}
    assert persistent.attention_tiles(32, 8, 128) == {"key_splits": 1, "pv_slices": 1}
    assert persistent.attention_tiles(1, 4, 64) == {"key_splits": 16, "pv_slices": 8}  # 8 columns a slice
    assert persistent.attention_tiles(3, 8, 128) == {"key_splits": 5, "pv_slices": 4}
    shape = persistent.decode_shape(1, 1024, 16, 8, 128, 3072, False, None)
    assert (shape.key_splits, shape.pv_slices, shape.o_cols) == (16, 8, persistent.TILES["o_cols"])
    sch = build_schedule(shape)
    assert check(sch) == [] and persistent.refusal(sch, persistent.BUILT, torch.bfloat16) is None
    assert sum(t.kind == Kind.ATTN_OUT for t in sch.tasks) == sum(t.kind == Kind.SCORES for t in sch.tasks) // 2 == 64


def test_a_part_of_the_table_drops_the_waits_on_what_it_leaves_out():
    sch = build_schedule(QWEN)
    back = qwen_table(BACK)
    assert [r[0] for r in back] == [int(t.kind) for t in sch.tasks if t.kind in BACK]
    o_proj = back[0]
    assert o_proj[0] == Kind.O_PROJ and o_proj[6:10] == [-1, -1, -1, -1]  # attention's output: the caller's input
    gate_up = next(r for r in back if r[0] == Kind.GATE_UP)
    assert gate_up[6:8] == [sch.counters.index("o_proj"), 1024 // 8]  # kept: its producers are in the part
    front = qwen_table(FRONT)
    assert {r[0] for r in front} == {Kind.QKV, Kind.SCORES}
    score = next(r for r in front if r[0] == Kind.SCORES)
    assert score[6:8] == [sch.counters.index("qkv[0]"), 4 * 128 // 32]  # KV head 0's q heads, k and v tiles


def _switch_cases() -> frozenset[Kind]:
    """The kinds with a `case` in persistent.cuh's task switch, by the values of its `enum Kind`."""
    src = (build.CUDA_DIR / "persistent.cuh").read_text()
    enum = re.search(r"enum Kind : int \{([^}]*)\}", src)
    assert enum is not None, "persistent.cuh: no `enum Kind : int { ... }`"
    values = {name: int(v) for name, v in re.findall(r"(k\w+) = (\d+)", enum.group(1))}
    return frozenset(Kind(values[name]) for name in re.findall(r"^\s*case (k\w+):", src, re.M))


def test_what_the_kernel_does_not_run_is_refused():
    sch = build_schedule(QWEN)
    assert persistent.refusal(sch, persistent.BUILT, torch.bfloat16) is None
    assert persistent.BUILT == _switch_cases()  # BUILT is the kernel's switch, no more and no less
    assert persistent.refusal(sch, FRONT, torch.float32) == "dtype torch.float32 (bf16 and fp16 only)"
    odd = build_schedule(LayerShape(1020, 16, 8, 128, 3072, (4,), **TILES))
    assert persistent.refusal(odd, FRONT, torch.bfloat16) == "hidden 1020 not a multiple of 8"
    stub = persistent.LayerTensors(*[torch.empty(8, dtype=torch.bfloat16)] * len(persistent.POINTERS))
    with pytest.raises(ValueError, match="persistent layer: dtype torch.float32"):
        persistent.run(sch, FRONT, persistent.LayerTensors(*[torch.empty(8)] * len(persistent.POINTERS)), 1e-6, 0.1)
    with pytest.raises(ValueError, match="x: expected a contiguous CUDA torch.bfloat16 tensor of \\(1, 1024\\)"):
        persistent.run(sch, FRONT, stub, 1e-6, 0.1)


# --- GPU -------------------------------------------------------------------------------------------------------------


def _chain(lens: tuple[int, ...], first: bool, device: torch.device, dtype: torch.dtype):
    """Qwen3-0.6B's layer with seeded weights on the device, and today's chain on one decode step: the schedule, the
    layer, the step's inputs (with the caches as they were before the step), and the chain's q/k/v, res1, rotated q
    and k, caches after the step, attention output (o_proj's input), mlp and res2."""
    case = C.make(C.QWEN3_0_6B, list(lens), seed=0, device=device, dtype=dtype)
    layer = case.layer
    s = case.step
    x, residual = s.x.to(device, dtype), None if first else s.residual.to(device, dtype)
    cos_sin = (s.cos.to(device, dtype), s.sin.to(device, dtype))
    caches = [(s.k_cache.to(device, dtype), s.v_cache.to(device, dtype))]
    before = {"k_cache": caches[0][0].clone(), "v_cache": caches[0][1].clone()}
    slots, b, a = s.slot_mapping.to(device), len(lens), layer.self_attn
    flags = CHAIN_FLAGS
    batch = ForwardBatch(
        is_prefill=False,
        slot_mapping=slots,
        kv_caches=caches,
        block_tables=s.block_tables.to(device),
        context_lens=s.context_lens.to(device),
        flags=flags,
    )
    seen: dict[str, torch.Tensor] = {}
    hook = layer.self_attn.o_proj.register_forward_pre_hook(lambda _m, args: seen.update(attn=args[0].clone()))
    ln = layer.input_layernorm
    with torch.no_grad():
        q, k, v, res1 = kernels.norm_qkv(
            flags,
            x.clone(),
            None if residual is None else residual.clone(),
            ln.weight,
            ln.eps,
            layer.self_attn.qkv_proj,
        )
        scratch = (before["k_cache"].clone(), before["v_cache"].clone())
        q3, k3, v3 = q.view(b, a.num_heads, -1), k.view(b, a.num_kv_heads, -1), v.view(b, a.num_kv_heads, -1)
        q_rot, k_rot = kernels.qkv_norm_rope_store(
            flags, q3, k3, v3, a.q_norm.weight, a.k_norm.weight, *cos_sin, a.eps, *scratch, slots
        )
        mlp, res2 = layer(x.clone(), None if residual is None else residual.clone(), cos_sin, batch)
    hook.remove()
    chain = dict(q=q, k=k, v=v, res1=res1, q_rot=q_rot.reshape(b, -1), k_rot=k_rot.reshape(b, -1))
    chain.update(k_cache=caches[0][0], v_cache=caches[0][1], attn=seen["attn"], mlp=mlp, res2=res2, out=mlp + res2)
    inputs = dict(before, slots=slots, cos=cos_sin[0].contiguous(), sin=cos_sin[1].contiguous())
    inputs.update(block_tables=batch.block_tables, context_lens=batch.context_lens)
    return build_schedule(case.shape(first, **TILES)), layer, x, residual, inputs, chain


def _tensors(layer, x: torch.Tensor, residual: torch.Tensor | None, inputs, attn: torch.Tensor | None = None):
    """The kernel's tensors: the step's inputs, the layer's weights, NaN-poisoned outputs and scratch (a cell the
    kernel fails to write shows), and `attn` as an input where the part run leaves ATTN_OUT out."""
    a = layer.self_attn
    weights = persistent_weights(layer)
    t = persistent.tensors(
        x, residual, weights, (inputs["k_cache"], inputs["v_cache"]), inputs["slots"], (inputs["cos"], inputs["sin"]),
        inputs["block_tables"], inputs["context_lens"], a.num_heads, int(inputs["context_lens"].max()), float("nan"),
    )  # fmt: skip
    return t if attn is None else replace(t, attn=attn.contiguous())


def _run(sch, layer, t, kinds):
    a = layer.self_attn
    return persistent.run(sch, kinds, t, layer.input_layernorm.eps, a.scaling, a.sliding_window)


def _assert_like_the_chain(t: persistent.LayerTensors, inputs, chain, names) -> None:
    """res1 bit for bit (the norm kernel's add); the named buffers within the chain's own bf16 kernel tolerance
    (lab/gates/numerics.py TOLERANCES['bf16']: the GEMV columns are summed at split 1 where the chain's GEMV splits K
    at some of these widths or, at b > 8, takes cuBLAS; attention is the generic kernel's order, the chain's the
    tiled mma kernels'); this step's cache slots bitwise the kernel's own k_rot and v and within tolerance of the
    chain's; every other cache position untouched."""
    assert torch.equal(t.res1, chain["res1"])
    for name in names:
        got = getattr(t, name)
        assert not got.isnan().any(), f"{name}: cells left unwritten"
        cmp = compare(got, chain[name], TOLERANCES["bf16"])
        assert cmp.passed, f"{name}: {cmp.as_dict()}"
    kc, vc = t.k_cache.flatten(0, 1), t.v_cache.flatten(0, 1)  # [slots, kv_heads, head_dim]
    slots = inputs["slots"]
    assert torch.equal(kc[slots].flatten(1), t.k_rot) and torch.equal(vc[slots].flatten(1), t.v)
    for name, got in (("k_cache", kc), ("v_cache", vc)):
        want = chain[name].flatten(0, 1)
        cmp = compare(got[slots].flatten(1), want[slots].flatten(1), TOLERANCES["bf16"])
        assert cmp.passed, f"{name} at this step's slots: {cmp.as_dict()}"
        others = torch.ones(got.shape[0], dtype=torch.bool, device=got.device)
        others[slots] = False
        assert torch.equal(got[others], want[others]), f"{name}: a position outside this step's slots changed"


CASES = [((1024,), False), ((1024,), True), ((1024, 77, 300, 5, 1024, 640, 129, 2000), False), ((512,) * 32, False)]
IDS = ["b1", "b1-layer0", "b8", "b32"]
EVERY = ("q", "k", "v", "q_rot", "k_rot", "attn", "res2", "mlp", "out")


@pytest.mark.parametrize("lens,first", CASES, ids=IDS)
def test_the_whole_layer_in_one_launch_matches_the_chain(cuda, lens, first):
    """The layer's whole table in one launch: every buffer against the chain on the same inputs, and every counter
    at the count of its signallers (each task ran once)."""
    sch, layer, x, residual, inputs, chain = _chain(lens, first, cuda, torch.bfloat16)
    t = _tensors(layer, x, residual, inputs)
    control = _run(sch, layer, t, persistent.BUILT)
    torch.cuda.synchronize()
    assert int(control[persistent.HEAD]) >= len(sch.tasks)  # every task taken, and one past per block at the end
    assert control[persistent.CONTROL_WORDS :].tolist() == sch.expected
    _assert_like_the_chain(t, inputs, chain, EVERY)


@pytest.mark.parametrize("lens,first", CASES, ids=IDS)
def test_the_two_halves_with_attention_as_an_input_match_the_chain(cuda, lens, first):
    """Two launches: the table's front part (q/k/v of the input's norm, the score splits with RoPE and the cache
    store), then its back part (o_proj to down) with the chain's attention output as input (`Schedule.encode(kinds=...)` dropping the wait on it)."""
    sch, layer, x, residual, inputs, chain = _chain(lens, first, cuda, torch.bfloat16)
    t = _tensors(layer, x, residual, inputs, chain["attn"])
    _run(sch, layer, t, FRONT)
    back = _run(sch, layer, t, BACK)
    torch.cuda.synchronize()
    n_o = sch.expected[sch.counters.index("o_proj")]
    assert int(back[persistent.CONTROL_WORDS + sch.counters.index("o_proj")]) == n_o  # every tile signalled once
    _assert_like_the_chain(t, inputs, chain, tuple(n for n in EVERY if n != "attn"))


def test_an_unreachable_wait_is_reported_not_hung(cuda):
    """A table whose last task waits for more signals than its counter gets: the block gives up after the kernel's
    wait limit (2 s) and the error word names the task; the launch ends."""
    sch, layer, x, residual, inputs, chain = _chain((64,), False, cuda, torch.bfloat16)
    t = _tensors(layer, x, residual, inputs)
    rows = sch.encode(kinds=persistent.BUILT)
    rows[-1][7] += 1000
    original = sch.encode
    sch.encode = lambda max_waits=2, kinds=None: rows  # type: ignore[method-assign]
    try:
        with pytest.raises(RuntimeError, match=f"error word {(2 << 20) + len(rows) - 1:#x}"):
            _run(sch, layer, t, persistent.BUILT)
    finally:
        sch.encode = original  # type: ignore[method-assign]


def test_the_tables_arm_matches_the_chain_and_a_captured_graph_replays_as_the_contexts_grow(cuda):
    """`decode_layer` under VT_PERSISTENT_LAYER through the layer's own forward (the path a decode step runs): the
    persistent arm ran (counted), its output and residual within the chain's tolerance; then the same call captured in
    a CUDA graph and replayed after every context has grown by one token (new slots, same table): against the chain
    at the grown lengths, so the table holding no context length is what a decode step replays."""
    lens = (1024, 77, 300, 5, 1024, 640, 129, 2000)
    # room for the grown step in each sequence's blocks
    case = C.make(C.QWEN3_0_6B, [n + 1 for n in lens], seed=3, device=cuda, dtype=torch.bfloat16)
    layer = case.layer
    s = case.step
    x, residual = s.x.to(cuda, torch.bfloat16), s.residual.to(cuda, torch.bfloat16)
    base_k, base_v = s.k_cache.to(cuda, torch.bfloat16), s.v_cache.to(cuda, torch.bfloat16)
    tables, block = s.block_tables.to(cuda), s.k_cache.shape[1]
    on = FlagSnapshot.defaults().with_(VT_PERSISTENT_LAYER=True)

    def step(grown: int):
        n = torch.tensor(lens, dtype=torch.int32, device=cuda) + grown
        pos = (n - 1).long()
        slots = tables.long()[torch.arange(len(lens), device=cuda), pos // block] * block + pos % block
        cos, sin = (t.to(cuda, torch.bfloat16) for t in rope_cos_sin(pos.cpu(), 128, 1e6, torch.float32))
        return n, slots, (cos.contiguous(), sin.contiguous())

    def chain_at(grown: int):
        n, slots, cos_sin = step(grown)
        caches = [(base_k.clone(), base_v.clone())]
        batch = ForwardBatch(
            is_prefill=False, slot_mapping=slots, kv_caches=caches, block_tables=tables, context_lens=n,
            flags=CHAIN_FLAGS,
        )  # fmt: skip
        with torch.no_grad():
            return layer(x, residual, cos_sin, batch)

    n, slots, cos_sin = step(0)
    static = dict(n=n, slots=slots, cos=cos_sin[0].clone(), sin=cos_sin[1].clone())
    caches = [(base_k.clone(), base_v.clone())]
    batch = ForwardBatch(
        is_prefill=False, slot_mapping=static["slots"], kv_caches=caches, block_tables=tables,
        context_lens=static["n"], flags=on,
    )  # fmt: skip
    kernels.reset_counts()
    with torch.no_grad():
        mlp, res2 = layer(x, residual, (static["cos"], static["sin"]), batch)
    assert kernels.counts().ran[("decode_layer", "persistent")] == 1
    want = chain_at(0)
    for got, ref in zip((mlp, res2), want, strict=True):
        cmp = compare(got, ref, TOLERANCES["bf16"])
        assert cmp.passed, cmp.as_dict()

    graph = torch.cuda.CUDAGraph()
    kernels.reset_counts()
    with torch.no_grad(), torch.cuda.graph(graph):
        out = layer(x, residual, (static["cos"], static["sin"]), batch)
    assert kernels.counts().ran[("decode_layer", "persistent")] == 1  # the capture recorded the persistent launch
    n, slots, cos_sin = step(1)
    static["n"].copy_(n)
    static["slots"].copy_(slots)
    static["cos"].copy_(cos_sin[0])
    static["sin"].copy_(cos_sin[1])
    caches[0][0].copy_(base_k)
    caches[0][1].copy_(base_v)
    graph.replay()
    torch.cuda.synchronize()
    kernels.raise_persistent_faults()
    for got, ref in zip(out, chain_at(1), strict=True):
        cmp = compare(got, ref, TOLERANCES["bf16"])
        assert cmp.passed, cmp.as_dict()


@pytest.mark.parametrize("lens", [(100,), (37, 5, 64, 100, 1, 17, 33, 80)], ids=["b1", "b8"])
def test_a_whole_model_step_in_one_launch_matches_the_engine(cuda, lens):
    """Embedding, three layers, the final norm and the LM head (tied to the embedding) as one launch of the step's
    table (`build_model_step`, three layers' descriptors): the final hidden state and the logits against the engine's
    own Qwen3ForCausalLM on the same step within the chain's bf16 tolerance, every layer's K/V slots written, every
    counter at its signallers' count."""
    case = C.make_model(C.SMALL, list(lens), seed=7, layers=STACK_LAYERS, vocab=400, device=cuda, dtype=torch.bfloat16)
    lm = case.lm
    assert lm is not None
    step = C.on(case.fresh_step(True), cuda, torch.bfloat16)
    ref_step = C.on(case.fresh_step(True), cuda, torch.bfloat16)
    want = C.reference_model(replace(case, lm=lm), ref_step)
    sch = build_model_step(case.shape(True, **TILES), STACK_LAYERS, 400, 64)
    layers, model = C.model_tensors(case, step, head=True)
    caches, x, m = step.caches(), layers[0].x, lm.model
    a = lm.model.layers[0].self_attn
    control = persistent.run_step(sch, persistent.BUILT, layers, m.norm.eps, a.scaling, None, model)
    torch.cuda.synchronize()
    assert control[persistent.CONTROL_WORDS :].tolist() == sch.expected
    assert torch.equal(x, m.embed_tokens.weight[step.ids])  # the EMBED tasks gathered each row's token
    for name in ("final", "logits"):  # after three layers: three layers' tolerance
        got = getattr(model, name)
        assert not got.isnan().any(), f"{name}: cells left unwritten"
        cmp = compare(got, want[name], STACK)
        assert cmp.passed, f"{name}: {cmp.as_dict()}"
    for i, ((k, v), (rk, rv)) in enumerate(zip(caches, ref_step.caches(), strict=True)):
        slots = step.slot_mapping
        for got, ref in ((k, rk), (v, rv)):
            cmp = compare(got.flatten(0, 1)[slots], ref.flatten(0, 1)[slots], TOLERANCES["bf16"])
            assert cmp.passed, f"layer {i} cache slots: {cmp.as_dict()}"


@pytest.mark.parametrize("take", list(persistent.TAKES))
def test_a_traced_launch_fills_every_tasks_times_and_computes_the_same(cuda, take):
    """The step's launch with a trace (engine/cuda/persistent.py `TRACE`) at each of the kernel's take points: every
    task's row filled on an SM of the device, taken <= waits met <= staged <= signalled, a task never met before a
    task it waits on signalled; the outputs bit for bit the untraced launch's at the default take; lab/persistent/
    trace.py's summary of it accounts for the whole span."""
    case = C.make_model(C.SMALL, [100, 7], seed=3, layers=2, vocab=400, device=cuda, dtype=torch.bfloat16)
    assert case.lm is not None
    sch = build_model_step(case.shape(True, **TILES), 2, 400, 0)
    a, eps = case.layers[0].self_attn, case.lm.model.norm.eps
    finals = []
    trace = torch.zeros(len(sch.tasks), len(persistent.TRACE), dtype=torch.int64, device=cuda)
    for tr, how in ((None, persistent.TAKE), (trace, take)):
        step = C.on(case.fresh_step(True), cuda, torch.bfloat16)
        layers, model = C.model_tensors(case, step, head=False)
        persistent.run_step(sch, persistent.BUILT, layers, eps, a.scaling, None, model, tr, how)
        finals.append(model.final)
    torch.cuda.synchronize()
    assert torch.equal(finals[0], finals[1])
    rows = trace.tolist()
    sms = torch.cuda.get_device_properties(cuda).multi_processor_count
    done: dict[int, list[int]] = {}
    for task, (sm, taken, met, staged, signalled) in zip(sch.tasks, rows, strict=True):
        assert 0 <= sm < sms and 0 < taken <= met <= signalled, (task.index, task.kind)
        # every kind that stages an input marks it (the model's ends do not)
        marks = task.kind not in (Kind.EMBED, Kind.FINAL_NORM)
        assert (met <= staged <= signalled) if marks else staged == 0, (task.index, task.kind, staged)
        done.setdefault(task.signal, []).append(signalled)
    for task, row in zip(sch.tasks, rows, strict=True):
        for counter, target in task.waits:  # the target-th signal of the counter came before this task's start
            assert sorted(done[counter])[target - 1] <= row[2] + 1000, (task.index, counter)  # timer: ~1 us steps
    s = T.summarize(rows, sch)
    assert s.run_share + s.wait_share + s.idle_share == pytest.approx(1.0)
    assert s.span_us > 0 and sum(k.tasks for k in s.kinds) == len(sch.tasks)


def test_a_take_the_kernel_does_not_have_is_refused_by_name():
    with pytest.raises(ValueError, match="take 'early': one of at-run, async, after-signal"):
        persistent._launch(None, persistent.BUILT, [], None, 1e-6, 1.0, None, None, None, None, "early")  # type: ignore[arg-type]


def test_the_models_op_runs_the_persistent_step_and_a_graph_replays_it(cuda):
    """`decode_model` under VT_PERSISTENT_STEP through the model's own forward (the decode program's call): the
    persistent step counted, the final hidden state within the chain's bf16 tolerance of the model with the flag
    off, every layer's cache slots written alike; then captured in a CUDA graph and replayed after every context
    grew by a token (new slots, the same table and scratch) against the chain at the grown lengths."""
    lens = (37, 5, 64, 100, 1, 17, 33, 80)
    case = C.make_model(
        C.SMALL, [n + 1 for n in lens], seed=8, layers=STACK_LAYERS, vocab=400, device=cuda, dtype=torch.bfloat16
    )
    assert case.lm is not None
    model = case.lm.model
    base = C.on(case.fresh_step(True), cuda, torch.bfloat16)
    tables, block = base.block_tables, base.k_cache.shape[1]
    on = FlagSnapshot.defaults().with_(VT_PERSISTENT_STEP=True)

    def inputs(grown: int):
        n = torch.tensor(lens, dtype=torch.int32, device=cuda) + grown
        pos = (n - 1).long()
        slots = tables.long()[torch.arange(len(lens), device=cuda), pos // block] * block + pos % block
        return n, pos, slots

    def caches():
        return [(k.clone(), v.clone()) for k, v in base.caches()]

    def run(grown: int, flags: FlagSnapshot, kv):
        n, pos, slots = inputs(grown)
        batch = ForwardBatch(
            is_prefill=False, slot_mapping=slots, kv_caches=kv, block_tables=tables, context_lens=n, flags=flags
        )
        with torch.no_grad():
            return model(base.ids, pos, batch)

    kernels.reset_counts()
    kv_on, kv_off = caches(), caches()
    got, want = run(0, on, kv_on), run(0, CHAIN_FLAGS, kv_off)
    assert kernels.counts().ran[("decode_model", "persistent_step")] == 1
    cmp = compare(got, want, STACK)
    assert cmp.passed, cmp.as_dict()
    slots = inputs(0)[2]
    for layer, ((k, v), (rk, rv)) in enumerate(zip(kv_on, kv_off, strict=True)):
        # layer 0's K/V is one op from the chain's; a later layer's carries the layers before it (the H100 run of
        # 063f476: layer K slots 91.4% bitwise, max |diff| 0.023, over the one-op bf16 tolerance)
        tol = TOLERANCES["bf16"] if layer == 0 else STACK
        for a, b in ((k, rk), (v, rv)):
            cmp = compare(a.flatten(0, 1)[slots], b.flatten(0, 1)[slots], tol)
            assert cmp.passed, (layer, cmp.as_dict())

    n, pos, slots = inputs(0)
    kv = caches()
    batch = ForwardBatch(
        is_prefill=False, slot_mapping=slots, kv_caches=kv, block_tables=tables, context_lens=n, flags=on
    )
    with torch.no_grad():
        model(base.ids, pos, batch)  # the warm-up: the table and control words made outside the capture
        graph = torch.cuda.CUDAGraph()
        kernels.reset_counts()
        with torch.cuda.graph(graph):
            out = model(base.ids, pos, batch)
    assert kernels.counts().ran[("decode_model", "persistent_step")] == 1  # the capture recorded the step's launch
    grown_n, grown_pos, grown_slots = inputs(1)
    n.copy_(grown_n)
    pos.copy_(grown_pos)
    slots.copy_(grown_slots)
    for (k, v), (bk, bv) in zip(kv, base.caches(), strict=True):
        k.copy_(bk)
        v.copy_(bv)
    graph.replay()
    torch.cuda.synchronize()
    kernels.raise_persistent_faults()
    cmp = compare(out, run(1, CHAIN_FLAGS, caches()), STACK)
    assert cmp.passed, cmp.as_dict()


@pytest.mark.parametrize("lens", [(100,), (37, 5, 64, 100, 1, 17, 33, 80)], ids=["b1", "b8"])
def test_the_step_in_one_launch_is_bitwise_the_layer_arm_in_turn(cuda, lens):
    """The persistent step (one launch: embedding, three layers, final norm) against the model's chain with each
    layer on the persistent layer arm (three launches, the embedding and the final norm kernels between): the same
    tile arithmetic, so the final hidden state and every layer's cache slots are bit for bit equal; a difference is
    a defect of the step (its layer chain, its shared scores), not of rounding."""
    case = C.make_model(C.SMALL, list(lens), seed=9, layers=STACK_LAYERS, vocab=400, device=cuda, dtype=torch.bfloat16)
    assert case.lm is not None
    model = case.lm.model
    base = C.on(case.fresh_step(True), cuda, torch.bfloat16)
    pos = (base.context_lens - 1).long()

    def run(flags: FlagSnapshot):
        kv = [(k.clone(), v.clone()) for k, v in base.caches()]
        batch = ForwardBatch(
            is_prefill=False, slot_mapping=base.slot_mapping, kv_caches=kv, block_tables=base.block_tables,
            context_lens=base.context_lens, flags=flags,
        )  # fmt: skip
        with torch.no_grad():
            return model(base.ids, pos, batch), kv

    kernels.reset_counts()
    step, step_kv = run(FlagSnapshot.defaults().with_(VT_PERSISTENT_STEP=True))
    layers, layers_kv = run(FlagSnapshot.defaults().with_(VT_PERSISTENT_LAYER=True))
    ran = kernels.counts().ran
    assert ran[("decode_model", "persistent_step")] == 1 and ran[("decode_layer", "persistent")] == 3
    kernels.raise_persistent_faults()
    assert torch.equal(step, layers), compare(step, layers, TOLERANCES["bf16"]).as_dict()
    for (k, v), (lk, lv) in zip(step_kv, layers_kv, strict=True):
        assert torch.equal(k, lk) and torch.equal(v, lv)
