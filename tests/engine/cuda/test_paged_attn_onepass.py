"""The one-pass paged decode attention arm: compile (nvcc), the split-count rule, the host checks and the head_dim-256
variant's shared-memory arithmetic and device predicate (no GPU), routing by VT_ATTN_ONEPASS (CPU), and on a GPU
split-count agreement, the window, the folded combine, capture in a CUDA graph, and at head_dim 256 the occupancy
(two blocks per SM on sm_90) and the numerics over contexts, batch sizes, groups, windows and splits. Its gate
numerics cases (lab/gates/cases/attention.py, arm "tiled_onepass") run in test_attention.py."""

from __future__ import annotations

import ctypes
import dataclasses

import pytest
import torch

from engine import kernels
from engine.cuda.device import Device
from lab.gates import numerics
from lab.gates.cases import attention as cases

FAMILY = "paged_attn_onepass"  # the conftest's `cuda` and `compiled` fixtures read these
KERNELS = "the one-pass attention kernel"

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the kernel runs on a GPU")
H200 = Device(0, (9, 0), 227 * 1024, 132)  # 228 KB of shared memory per SM, 227 KB opt-in per block
A100 = Device(0, (8, 0), 163 * 1024, 108)  # 164 KB per SM, 163 KB opt-in
SM89 = Device(0, (8, 9), 99 * 1024, 128)  # 100 KB per SM, 99 KB opt-in
NO_GPU = Device(0, (0, 0), 0, 0, "no CUDA device")


def test_source_compiles_and_exports_its_launchers(compiled) -> None:
    for symbol in (
        "vt_paged_attn_onepass_decode",
        "vt_paged_attn_onepass_num_splits",
        "vt_paged_attn_onepass_split_rule",
        "vt_paged_attn_onepass_blocks_per_sm",
        "vt_paged_attn_onepass_smem_bytes",
        "vt_paged_attn_onepass_last_error",
    ):
        assert hasattr(compiled, symbol), symbol


@pytest.mark.parametrize(
    ("rows", "max_context", "blocks_per_sm", "splits"),
    [
        # the H200 (132 SMs, 2 blocks of the head_dim-128 kernel per SM): the measured best of a split sweep
        (8, 32768, 2, 32),  # batch 1: 32 splits of 16 tiles in one wave (58.4 us; 30 splits 64.0)
        (8, 1024, 2, 8),  # 16 tiles: 8 splits of 2 (11.2 us; 16 splits of 1 12.3)
        (64, 2048, 2, 4),  # batch 8 x 8 KV heads: 256 blocks, one wave
        (256, 1024, 2, 1),  # batch 32: two splits would need a second wave for the same tiles
        (512, 4096, 2, 1),  # batch 64: already two waves of whole contexts
        (8, 64, 2, 1),  # one tile: nothing to split
        # head_dim 256, batch 64 x 2 KV heads, context 4096 (the sixth peer shape): two blocks per SM give its 128
        # blocks 2 splits of 32 tiles in one wave; at the one block the K+V stages left, 64 tiles in one split
        (128, 4096, 2, 2),
        (128, 4096, 1, 1),
        (0, 4096, 2, 1),
    ],
)
def test_split_rule_minimises_waves_times_tiles(
    compiled, rows: int, max_context: int, blocks_per_sm: int, splits: int
) -> None:
    assert compiled.vt_paged_attn_onepass_split_rule(rows, max_context, 132, blocks_per_sm) == splits


def test_split_rule_stays_within_the_tiles_and_the_partial_buffers(compiled) -> None:
    for rows in (1, 8, 64, 512):
        for ctx in (1, 64, 65, 1000, 32768, 1 << 20):
            got = compiled.vt_paged_attn_onepass_split_rule(rows, ctx, 132, 2)
            assert 1 <= got <= min(64, -(-ctx // 64)), (rows, ctx, got)


def test_supported_shapes() -> None:
    from engine.cuda import paged_attn_onepass as onepass

    assert onepass.supports(128, 4, torch.bfloat16) and onepass.supports(64, 3, torch.float16)
    assert onepass.supports(256, 4, torch.bfloat16) and onepass.supports(256, 8, torch.float16)  # compiled
    assert not onepass.supports(96, 4, torch.bfloat16)
    assert not onepass.supports(128, 9, torch.bfloat16)  # more rows than the 8 live rows of the mma tile
    assert not onepass.supports(128, 4, torch.float32)


def _smem_export(compiled, head_dim: int, dtype_code: int) -> tuple[int, int]:
    out = ctypes.c_int(-1)
    rc = compiled.vt_paged_attn_onepass_smem_bytes(ctypes.byref(out), head_dim, dtype_code)
    return rc, out.value


def test_the_predicates_stage_arithmetic_is_the_kernels(compiled) -> None:
    """The binding's copy of the header's `smem_bytes` (what the device predicate reasons with) is the compiled one:
    unpadded K and V rows (head_dim elements, their chunks swizzled), and at head_dim 256 the separate K and V stages'
    3 x 64 x 256 x 2 B plus Q's 8 padded rows, not the K+V stages' 196608 B that would hold one block per SM."""
    from engine.cuda import ffi
    from engine.cuda import paged_attn_onepass as onepass

    for d in onepass.HEAD_DIMS:
        for dtype in onepass.DTYPES:
            assert _smem_export(compiled, d, ffi.DTYPE_CODES[dtype]) == (0, onepass.smem_bytes(d)), (d, dtype)
    assert onepass.smem_bytes(256) == 3 * 64 * 256 * 2 + 8 * 264 * 2 == 102528
    assert onepass.smem_bytes(128) == 3 * 2 * 64 * 128 * 2 == 98304
    assert onepass.smem_bytes(64) == 3 * 2 * 64 * 64 * 2 == 49152
    rc, _ = _smem_export(compiled, 96, ffi.DTYPE_CODES[torch.bfloat16])
    compiled.vt_paged_attn_onepass_last_error.restype = ctypes.c_char_p
    assert rc != 0 and b"head_dim 96 not in {64, 128, 256}" in compiled.vt_paged_attn_onepass_last_error()


def test_blocks_per_sm_by_the_devices_shared_memory() -> None:
    """An H200 holds two head_dim-256 blocks per SM (2 x (102528 + 128 + 1024) = 207360 <= 228 KB), an A100 one,
    an sm_89 part none (its 99 KB opt-in is short of one), and no device none; at head_dim 128 an sm_89 part holds
    one (98304 + 128 + 1024 <= 100 KB)."""
    from engine.cuda import paged_attn_onepass as onepass

    assert [onepass.blocks_fit(d, H200) for d in (64, 128, 256)] == [4, 2, 2]
    assert [onepass.blocks_fit(d, A100) for d in (64, 128, 256)] == [3, 1, 1]
    assert [onepass.blocks_fit(d, SM89) for d in (64, 128, 256)] == [2, 1, 0]
    assert onepass.blocks_fit(256, NO_GPU) == 0
    assert onepass.fits(256, H200) and not onepass.fits(256, A100) and onepass.fits(128, A100)


def test_the_device_predicate_admits_head_dim_256_only_where_two_blocks_fit_per_sm() -> None:
    from engine.cuda import paged_attn_onepass as onepass

    assert onepass.supports(256, 4, torch.bfloat16, H200) and onepass.supports(256, 1, torch.float16, H200)
    for device in (A100, SM89, NO_GPU):
        assert not onepass.supports(256, 4, torch.bfloat16, device), device
    # head_dim 64 and 128 need one block to fit: an A100 and an sm_89 part take both (the latter's 99 KB opt-in holds
    # the head_dim-128 block's 98304 B and 128 static); an opt-in one byte short of a block's dynamic and static bytes
    # admits none (a launch that would fail)
    assert onepass.supports(128, 4, torch.bfloat16, A100) and onepass.supports(64, 4, torch.bfloat16, SM89)
    assert onepass.supports(128, 4, torch.bfloat16, SM89) and not onepass.supports(64, 4, torch.bfloat16, NO_GPU)
    for d in (64, 128):
        need = onepass.smem_bytes(d) + onepass.STATIC_SMEM
        assert onepass.supports(d, 4, torch.bfloat16, dataclasses.replace(SM89, smem_optin=need)), d
        assert not onepass.supports(d, 4, torch.bfloat16, dataclasses.replace(SM89, smem_optin=need - 1)), d
    assert not onepass.supports(256, 9, torch.bfloat16, H200)  # the shape rules still hold


def test_the_tables_predicate_asks_the_tables_device_at_head_dim_256() -> None:
    """`supports_onepass` reasons with the device the table checks needs against (`kernels.on_device`), so a
    benchmark or test asking what an A100 would run at head_dim 256 is told: not the one-pass arm."""
    from engine.kernels.attention import supports_onepass

    x = cases.paged_inputs(
        3, torch.device("cpu"), dtype=torch.bfloat16, ctx=40, d=256, group=4, block_size=16, window=None
    )
    args = cases._args(x)[:5]
    for device in (A100, SM89):
        with kernels.on_device(device):
            assert not supports_onepass(*args)
    assert not supports_onepass(*args)  # the tensor's own probe: a CPU tensor has no device to fit on


def test_the_table_takes_the_onepass_arm_first_only_when_flagged() -> None:
    from engine import kernels
    from engine.flags import FlagSnapshot

    op, on = kernels.paged_decode_attention, FlagSnapshot.defaults()
    first = op.arms[0]
    assert first.name == "tiled_onepass" and first.enabled(on)  # first, and ON since its flip
    assert not first.enabled(on.with_(VT_ATTN_ONEPASS=False))  # its rollback
    assert not first.enabled(on.with_(VT_ATTN_ONEPASS=True, VT_ATTN_TILED=False))  # the tiled rollback turns it off
    assert kernels.flags_of("paged_decode_attention", "tiled_onepass") == ("VT_ATTN_ONEPASS", "VT_ATTN_TILED")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"num_q_heads": 6, "num_kv_heads": 4}, "num_q_heads 6 is not a multiple of num_kv_heads 4"),
        ({"num_q_heads": 36, "num_kv_heads": 4}, "9 query heads per KV head \\(at most 8\\)"),
        ({"num_splits": 65}, "num_splits 65 not in \\[1, 64\\]"),
        ({"num_splits": 2}, "2 splits need m_part, l_part, o_part and counters"),
        ({"max_blocks": 1 << 20, "block_size": 1 << 12}, "positions overflow int"),
        ({"head_dim": 96}, "head_dim 96 not in \\{64, 128, 256\\}"),
    ],
)
def test_launcher_checks_its_arguments_before_any_launch(compiled, args: dict, message: str) -> None:
    """The checks run on the host before any CUDA call, so they hold without a GPU."""
    import re

    full = {
        "batch": 1,
        "num_q_heads": 8,
        "num_kv_heads": 2,
        "head_dim": 128,
        "block_size": 16,
        "max_blocks": 4,
        "num_splits": 1,
    } | args
    fake = ctypes.c_void_p(16)  # aligned, never dereferenced: the launcher returns first
    scratch = [None] * 4 if "need" in message else [fake] * 4
    rc = compiled.vt_paged_attn_onepass_decode(
        fake,
        *scratch,
        *([fake] * 5),
        full["batch"],
        full["num_q_heads"],
        full["num_kv_heads"],
        full["head_dim"],
        full["block_size"],
        full["max_blocks"],
        ctypes.c_float(0.1),
        0,
        full["num_splits"],
        1,
        None,
    )
    compiled.vt_paged_attn_onepass_last_error.restype = ctypes.c_char_p
    assert rc != 0 and re.search(message, compiled.vt_paged_attn_onepass_last_error().decode()), rc


def _kernel_names(run) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("window", [None, 100])
@pytest.mark.parametrize("d", [128, 256])
def test_split_counts_agree_in_one_launch(window: int | None, d: int) -> None:
    """Every split count gives the one-split output within bf16, in one kernel launch, and leaves the arrival
    counters zero for the next launch."""
    from engine.cuda import paged_attn_onepass as onepass
    from engine.cuda import paged_attn_tiled as tiled

    x = cases.paged_inputs(
        4, torch.device("cuda"), dtype=torch.bfloat16, ctx=3000, d=d, group=4, block_size=32, window=window
    )
    args = cases._args(x)
    one = onepass.decode(*args, window, splits=1)
    for splits in (2, 13, 64):
        got = numerics.compare(onepass.decode(*args, window, splits=splits), one, numerics.TOLERANCES["bf16"])
        assert got.passed, (splits, got)
        assert int(tiled._COUNTERS[x["q"].device].abs().sum()) == 0
    names = _kernel_names(lambda: onepass.decode(*args, window, splits=13))
    assert len(names) == 1 and "onepass_kernel" in names[0], names


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("d", [128, 256])
def test_only_positions_in_the_window_move_the_output(d: int) -> None:
    from engine.cuda import paged_attn_onepass as onepass

    x = cases.paged_inputs(
        9, torch.device("cuda"), dtype=torch.bfloat16, ctx=100, d=d, group=4, block_size=16, window=40
    )
    base = onepass.decode(*cases._args(x), 40)
    for pos, moves in ((59, False), (60, True)):  # sequence 0 attends positions 60..99
        v = x["v_cache"].clone()
        v[int(x["block_tables"][0, pos // 16]), pos % 16] += 3.0
        out = onepass.decode(x["q"], x["k_cache"], v, *cases._args(x)[3:], 40)
        assert bool((out[0] != base[0]).any()) == moves, pos
        assert torch.equal(out[1:], base[1:])


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("d", [128, 256])
def test_replays_in_a_cuda_graph_with_new_lengths(d: int) -> None:
    """No host read of the context lengths: the graph replays correctly after the lengths change in place."""
    from engine.cuda import paged_attn_onepass as onepass

    x = cases.paged_inputs(
        6, torch.device("cuda"), dtype=torch.bfloat16, ctx=2000, d=d, group=4, block_size=32, window=None
    )
    args = cases._args(x)
    onepass.decode(*args, splits=7)  # build, load and make the counters outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = onepass.decode(*args, splits=7)
    x["context_lens"].copy_(torch.tensor([1500, 7, 1999], dtype=torch.int32))
    graph.replay()
    got = numerics.compare(out, cases.ref_fp32(x), numerics.TOLERANCES["bf16"])
    assert got.passed, got


@needs_gpu
@pytest.mark.gpu
def test_first_use_under_capture_falls_to_the_next_arm(monkeypatch) -> None:
    """Its arrival counters cannot be zeroed inside a capture: with several splits the table must decline the arm
    (and count the fallback) rather than run a launch that fails."""
    from engine import kernels
    from engine.cuda import paged_attn_onepass as onepass
    from engine.cuda import paged_attn_tiled as tiled
    from engine.flags import FlagSnapshot

    monkeypatch.setattr(tiled, "_COUNTERS", {})
    x = cases.paged_inputs(
        6, torch.device("cuda"), dtype=torch.bfloat16, ctx=20000, d=128, group=4, block_size=32, window=None
    )
    args = cases._args(x)
    shape = tiled.Shape.of(x["q"], x["k_cache"], x["block_tables"])
    assert onepass.num_splits(shape.batch * shape.hkv, shape.max_blocks * 32, 128, torch.bfloat16, 0) > 1
    onepass.decode(*args, splits=1)  # build and load outside the capture, without making the counters
    snap = FlagSnapshot.defaults().with_(VT_ATTN_ONEPASS=True, VT_ATTN_PV_PIPELINED=False)
    kernels.reset_counts()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernels.paged_decode_attention(snap, *args)
    seen = kernels.counts()
    op = kernels.paged_decode_attention.name
    assert seen.ran[(op, "tiled")] == 1 and seen.ran[(op, "tiled_onepass")] == 0, kernels.render_counts()
    kernels.reset_counts()
    kernels.paged_decode_attention(snap, *args)  # outside a capture the counters are made: the one pass
    assert kernels.counts().ran[(op, "tiled_onepass")] == 1, kernels.render_counts()


def _batch_inputs(seed: int, batch: int, ctx: int, group: int, window: int | None, dtype: torch.dtype) -> dict:
    """`batch` sequences at head_dim 256 (the first `ctx` long, the rest random in [1, ctx]) over shuffled 16-token
    blocks, the layout of `cases.paged_inputs` for any batch size."""
    import math

    g = torch.Generator().manual_seed(seed)
    block, d, hkv = 16, 256, cases.NUM_KV_HEADS
    lens = [ctx] + torch.randint(1, ctx + 1, (batch - 1,), generator=g).tolist()
    need = [math.ceil(n / block) for n in lens]
    num_blocks = sum(need) + 2
    perm = torch.randperm(num_blocks, generator=g).to(torch.int32)
    tables = torch.randint(0, num_blocks, (batch, max(need) + 1), generator=g, dtype=torch.int32)
    start = 0
    for b, n in enumerate(need):
        tables[b, :n] = perm[start : start + n]
        start += n
    shape = (num_blocks, block, hkv, d)
    return {
        "q": torch.randn(batch, hkv * group, d, generator=g).to(dtype).cuda(),
        "k_cache": torch.randn(*shape, generator=g).to(dtype).cuda(),
        "v_cache": torch.randn(*shape, generator=g).to(dtype).cuda(),
        "block_tables": tables.cuda(),
        "context_lens": torch.tensor(lens, dtype=torch.int32).cuda(),
        "scale": 1.0 / math.sqrt(d),
        "window": window,
    }


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_head_dim_256_occupancy_is_what_the_predicate_reckons(dtype: torch.dtype) -> None:
    """The CUDA occupancy calculator (after the opt-in) never exceeds the binding's shared-memory arithmetic (the
    registers may hold it lower), and on sm_90 it says two head_dim-256 blocks per SM, as the arithmetic does: the
    variant's reason to exist."""
    from engine.cuda import device as cuda_device
    from engine.cuda import paged_attn_onepass as onepass

    dev = cuda_device.probe(0)
    for d in onepass.HEAD_DIMS:
        assert onepass.blocks_per_sm(d, dtype, 0) <= onepass.blocks_fit(d, dev), (d, dev)
    if dev.capability == (9, 0):
        assert onepass.blocks_per_sm(256, dtype, 0) == onepass.blocks_fit(256, dev) == 2
        assert onepass.supports(256, 4, dtype, dev)


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("ctx", [1, 31, 32, 33, 1000, 5000])
@pytest.mark.parametrize(("batch", "group", "window"), [(1, 4, None), (4, 8, None), (16, 1, None), (4, 2, 100)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_head_dim_256_matches_the_fp32_reference(
    ctx: int, batch: int, group: int, window: int | None, dtype: torch.dtype
) -> None:
    """K and V in separate stages and Q in shared memory keep the head_dim-128 numerics: within the dtype's
    tolerance of the fp32 reference at every split count the rule picks, one split and 64."""
    from engine.cuda import paged_attn_onepass as onepass

    x = _batch_inputs(ctx + batch, batch, ctx, group, window, dtype)
    ref = cases.ref_fp32(x)
    tol = numerics.TOLERANCES["bf16" if dtype == torch.bfloat16 else "fp16"]
    for splits in (None, 1, 3, 64):
        got = numerics.compare(onepass.decode(*cases._args(x), window, splits=splits), ref, tol)
        assert got.passed, (splits, got)


@needs_gpu
@pytest.mark.gpu
def test_the_table_takes_head_dim_256_where_two_blocks_fit() -> None:
    """With the flag on, the table runs the one-pass arm at head_dim 256 on a device that holds two blocks per SM
    and passes it by on one told to be an A100 (`kernels.on_device`), where one block would fit."""
    from engine.cuda import device as cuda_device
    from engine.flags import FlagSnapshot

    if not cuda_device.probe(0).smem_optin >= 227 * 1024:
        pytest.skip("this GPU holds one head_dim-256 block per SM: the arm is not taken there")
    x = _batch_inputs(7, 2, 700, 4, None, torch.bfloat16)
    snap = FlagSnapshot.defaults().with_(VT_ATTN_ONEPASS=True)
    args = cases._args(x)
    assert kernels.paged_decode_attention.choose(snap, *args) == "tiled_onepass"
    with kernels.on_device(A100):
        assert kernels.paged_decode_attention.choose(snap, *args) != "tiled_onepass"
