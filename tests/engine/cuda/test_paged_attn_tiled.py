"""The tiled paged decode attention arm: compile (nvcc), routing by VT_ATTN_TILED (CPU), and on a GPU the
split heuristic, split-count invariance, the window, and capture in a CUDA graph without a host read.
Its numerics cases (lab/gates/cases/attention.py, arm "tiled") run in test_attention.py."""

from __future__ import annotations

import pytest
import torch

from lab.gates import numerics
from lab.gates.cases import attention as cases

FAMILY = "paged_attn_tiled"  # the conftest's `cuda` and `compiled` fixtures read these
KERNELS = "the tiled attention kernel"


def test_source_compiles_and_exports_its_launchers(compiled) -> None:
    for symbol in (
        "vt_paged_attn_tiled_decode",
        "vt_paged_attn_tiled_pipelined_decode",
        "vt_paged_attn_tiled_num_splits",
        "vt_paged_attn_tiled_last_error",
    ):
        assert hasattr(compiled, symbol), symbol


@pytest.mark.parametrize(
    ("rows", "max_context", "blocks_per_sm", "splits"),
    [
        (512, 4096, 4, 1),  # batch 64 x 8 KV heads: 512 blocks on 528 slots, 97% of one wave
        (512, 4096, 3, 3),  # 396 slots: 1 split fills 65% of its last wave, 2 splits 86%, 3 splits 97%
        (8, 32768, 4, 60),  # batch 1: the fewest splits that fill 90% of a wave
        (8, 1024, 4, 8),  # 16 tiles: at least 2 per split, however empty the device stays
        (8, 4096, 4, 32),  # 64 tiles: 32 splits of 2, still short of one wave
        (0, 4096, 4, 1),
    ],
)
def test_split_rule_fills_waves_within_the_work(
    compiled, rows: int, max_context: int, blocks_per_sm: int, splits: int
) -> None:
    assert compiled.vt_paged_attn_tiled_split_rule(rows, max_context, 132, blocks_per_sm) == splits


def test_supported_shapes() -> None:
    from engine.cuda import paged_attn_tiled as tiled

    assert tiled.supports(128, 4, torch.bfloat16) and tiled.supports(256, 8, torch.float16)
    assert tiled.supports(64, 3, torch.bfloat16)  # any group up to 8, not only powers of two
    assert not tiled.supports(128, 9, torch.bfloat16)  # more rows than the 8 live rows of the mma tile
    assert not tiled.supports(96, 4, torch.bfloat16)
    assert not tiled.supports(128, 4, torch.float32)


def test_the_table_takes_the_tiled_arm_only_when_flagged_and_supported() -> None:
    from engine import kernels
    from engine.flags import FlagSnapshot

    tiled, on = kernels.paged_decode_attention.arm("tiled"), FlagSnapshot.defaults()
    onepass, fused, pdl, pipelined = kernels.paged_decode_attention.arms[:4]
    assert onepass.name == "tiled_onepass" and onepass.enabled(on)  # the online softmax: first, ON since its flip
    assert fused.name == "tiled_fused" and not fused.enabled(on)  # the one launch: OFF by default
    assert pdl.name == "tiled_pipelined_pdl" and pdl.enabled(on)  # its passes chained by PDL: ON since its flip
    assert not pdl.enabled(on.with_(VT_ATTN_PDL=False)) and not pdl.enabled(on.with_(VT_ATTN_TILED=False))
    assert pipelined.name == "tiled_pipelined" and pipelined.enabled(on)  # then the pipelined P.V, ON
    assert kernels.paged_decode_attention.arms[4] is tiled  # the plain two passes: its rollback and fallback
    assert tiled.enabled(on) and not tiled.enabled(on.with_(VT_ATTN_TILED=False))
    x = cases.paged_inputs(
        3, torch.device("cpu"), dtype=torch.bfloat16, ctx=40, d=128, group=4, block_size=16, window=None
    )
    assert tiled.supports(*cases._args(x), None)
    fp32 = {k: (v.float() if torch.is_tensor(v) and v.is_floating_point() else v) for k, v in x.items()}
    assert not tiled.supports(*cases._args(fp32), None)  # fp32 is not compiled: another arm


needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the kernel runs on a GPU")


@needs_gpu
@pytest.mark.gpu
def test_split_count_fills_the_device_and_follows_the_capacity() -> None:
    from engine.cuda import paged_attn_tiled as tiled

    assert 1 <= tiled.num_splits(512, 4096, 128, torch.bfloat16, 0) <= 4  # batch 64 x 8 KV heads: a few waves
    assert 16 <= tiled.num_splits(8, 32768, 128, torch.bfloat16, 0) <= 64  # batch 1: split to fill the SMs
    assert tiled.num_splits(8, 128, 128, torch.bfloat16, 0) == 1  # 2 tiles: too short to split
    assert tiled.num_splits(8, 256, 128, torch.bfloat16, 0) == 2  # 4 tiles: 2 per split
    assert tiled.num_splits(8, 1024, 128, torch.bfloat16, 0) == 8  # 16 tiles: at least 2 per split


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("window", [None, 100])
def test_split_counts_agree(window: int | None) -> None:
    from engine.cuda import paged_attn_tiled as tiled

    x = cases.paged_inputs(
        4, torch.device("cuda"), dtype=torch.bfloat16, ctx=3000, d=128, group=4, block_size=32, window=window
    )
    one = tiled.decode(*cases._args(x), window, splits=1)
    for splits in (2, 13, 64):
        got = numerics.compare(tiled.decode(*cases._args(x), window, splits=splits), one, numerics.TOLERANCES["bf16"])
        assert got.passed, (splits, got)


@needs_gpu
@pytest.mark.gpu
def test_only_positions_in_the_window_move_the_output() -> None:
    from engine.cuda import paged_attn_tiled as tiled

    x = cases.paged_inputs(
        9, torch.device("cuda"), dtype=torch.bfloat16, ctx=100, d=128, group=4, block_size=16, window=40
    )
    base = tiled.decode(*cases._args(x), 40)
    for pos, moves in ((59, False), (60, True)):  # sequence 0 attends positions 60..99
        v = x["v_cache"].clone()
        v[int(x["block_tables"][0, pos // 16]), pos % 16] += 3.0
        out = tiled.decode(x["q"], x["k_cache"], v, *cases._args(x)[3:], 40)
        assert bool((out[0] != base[0]).any()) == moves, pos
        assert torch.equal(out[1:], base[1:])


@needs_gpu
@pytest.mark.gpu
def test_captures_in_a_cuda_graph_and_replays_new_lengths() -> None:
    """No host read of the context lengths: the graph replays correctly after the lengths change in place."""
    from engine.cuda import paged_attn_tiled as tiled

    x = cases.paged_inputs(
        6, torch.device("cuda"), dtype=torch.bfloat16, ctx=2000, d=128, group=4, block_size=32, window=None
    )
    args = cases._args(x)
    tiled.decode(*args)  # build and load outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = tiled.decode(*args)
    x["context_lens"].copy_(torch.tensor([1500, 7, 1999], dtype=torch.int32))
    graph.replay()
    expected = tiled.decode(*args, splits=1)
    got = numerics.compare(out, expected, numerics.TOLERANCES["bf16"])
    assert got.passed, got


@needs_gpu
@pytest.mark.gpu
def test_fused_arm_first_used_under_capture_is_counted_as_the_two_passes_it_runs(monkeypatch) -> None:
    """Its arrival counters cannot be zeroed inside a capture, so that first call runs the two passes: the
    table must count the tiled arm and a tiled_fused fallback, not a tiled_fused call."""
    from engine import kernels
    from engine.cuda import paged_attn_tiled as tiled
    from engine.flags import FlagSnapshot

    monkeypatch.setattr(tiled, "_COUNTERS", {})  # the first use on this device happens under the capture
    x = cases.paged_inputs(
        6, torch.device("cuda"), dtype=torch.bfloat16, ctx=2000, d=128, group=4, block_size=32, window=None
    )
    args = cases._args(x)
    snap = FlagSnapshot.defaults().with_(VT_ATTN_TILED_FUSED=True, VT_ATTN_ONEPASS=False)
    tiled.decode(*args)  # build and load outside the capture, without making the counters
    kernels.reset_counts()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernels.paged_decode_attention(snap, *args)
    seen = kernels.counts()
    op = kernels.paged_decode_attention.name
    assert seen.ran[(op, "tiled")] == 1 and seen.ran[(op, "tiled_fused")] == 0, kernels.render_counts()
    assert sum(n for (o, a, _), n in seen.fallbacks.items() if (o, a) == (op, "tiled_fused")) == 1
    kernels.reset_counts()
    kernels.paged_decode_attention(snap, *args)  # outside a capture the counters are made: the one launch
    assert kernels.counts().ran[(op, "tiled_fused")] == 1, kernels.render_counts()


@pytest.mark.parametrize("binding", ["decode", "decode_fused"])
@pytest.mark.parametrize(
    ("dtype", "window", "v_blocks", "message"),
    [
        (torch.float32, None, None, r"q: the tiled arm takes head_dim in \(64, 128, 256\).*torch.float32"),
        (torch.bfloat16, 0, None, r"sliding_window: expected None or >= 1, got 0"),
        (torch.bfloat16, None, 1, r"v_cache: shape \(1, 16, 2, 128\) != k_cache's \(\d+, 16, 2, 128\)"),
    ],
)
def test_bindings_refuse_a_bad_argument_naming_it(binding, dtype, window, v_blocks, message) -> None:
    """`decode` and `decode_fused` share one checker: the same refusal, before any launch (so on the CPU)."""
    from engine.cuda import paged_attn_tiled as tiled

    x = cases.paged_inputs(2, torch.device("cpu"), dtype=dtype, ctx=40, d=128, group=4, block_size=16, window=None)
    if v_blocks is not None:
        x["v_cache"] = x["v_cache"][:v_blocks]
    call = tiled.decode if binding == "decode" else lambda *a: tiled.decode_fused(*a, None)
    with pytest.raises(ValueError, match=message):
        call(*cases._args(x), window)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"num_q_heads": 6, "num_kv_heads": 4}, "num_q_heads 6 is not a multiple of num_kv_heads 4"),
        ({"num_q_heads": 36, "num_kv_heads": 4}, "9 query heads per KV head \\(at most 8\\)"),
        ({"num_splits": 65}, "num_splits 65 not in \\[1, 64\\]"),
        ({"num_splits": 2}, "missing scratch \\(scores, m_part, l_part, o_part\\)"),
        ({"max_blocks": 1 << 20, "block_size": 1 << 12}, "positions overflow int"),
    ],
)
def test_launcher_checks_its_arguments_before_any_launch(compiled, args: dict, message: str) -> None:
    """The checks run on the host before any CUDA call, so they hold without a GPU."""
    import ctypes
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
    o_part = None if "missing" in message else fake  # the one scratch buffer only several splits need
    rc = compiled.vt_paged_attn_tiled_decode(
        fake,
        fake,
        fake,
        fake,
        o_part,
        fake,
        fake,
        fake,
        fake,
        fake,
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
    compiled.vt_paged_attn_tiled_last_error.restype = ctypes.c_char_p
    assert rc != 0 and re.search(message, compiled.vt_paged_attn_tiled_last_error().decode()), rc


def _kernel_names(run) -> list[str]:
    """The CUDA kernels `run()` launched, by name (torch's profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("splits", [1, 7])
def test_pipelined_pass_folds_the_split_sum_and_equals_the_plain_passes(splits: int) -> None:
    """Bitwise the plain two passes; with several splits the pipelined P.V pass adds the partial sums itself, so
    no split-sum kernel is launched, and it leaves the arrival counters zero for the next launch."""
    from engine.cuda import paged_attn_tiled as tiled

    x = cases.paged_inputs(
        4, torch.device("cuda"), dtype=torch.bfloat16, ctx=2000, d=128, group=4, block_size=32, window=None
    )
    args = cases._args(x)
    plain = tiled.decode(*args, splits=splits)
    piped = tiled.decode(*args, splits=splits, pipelined=True)
    assert torch.equal(plain, piped)
    names = {
        False: _kernel_names(lambda: tiled.decode(*args, splits=splits)),
        True: _kernel_names(lambda: tiled.decode(*args, splits=splits, pipelined=True)),
    }
    assert any("tiled_pv_kernel" in n for n in names[True]), names[True]
    assert any("tiled_sum_kernel" in n for n in names[False]) == (splits > 1), names[False]
    assert not any("tiled_sum_kernel" in n for n in names[True]), names[True]
    if splits > 1:  # one split needs no counters
        assert int(tiled._COUNTERS[x["q"].device].abs().sum()) == 0
    for _ in range(3):  # the counters are reused launch after launch
        assert torch.equal(tiled.decode(*args, splits=splits, pipelined=True), plain)


@needs_gpu
@pytest.mark.gpu
def test_pipelined_arm_replays_in_a_cuda_graph_with_new_lengths() -> None:
    from engine.cuda import paged_attn_tiled as tiled

    x = cases.paged_inputs(
        6, torch.device("cuda"), dtype=torch.bfloat16, ctx=2000, d=128, group=4, block_size=32, window=None
    )
    args = cases._args(x)
    tiled.decode(*args, pipelined=True)  # build, load and make the counters outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = tiled.decode(*args, pipelined=True)
    x["context_lens"].copy_(torch.tensor([1500, 7, 1999], dtype=torch.int32))
    graph.replay()
    assert torch.equal(out, tiled.decode(*args))


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("splits", [1, 7, 64])
def test_the_dependent_p_v_launch_keeps_the_bits_eager_and_replayed(splits: int) -> None:
    """VT_ATTN_PDL: the P.V pass launched as a programmatic dependent of the scores pass reads the scores only after
    they are written: bitwise the plain two passes, launch after launch, and replayed with new lengths and a new
    query written just before (each replay rewrites what both passes read)."""
    from engine.cuda import paged_attn_tiled as tiled

    x = cases.paged_inputs(
        5, torch.device("cuda"), dtype=torch.bfloat16, ctx=2000, d=128, group=4, block_size=32, window=None
    )
    args = cases._args(x)
    for _ in range(3):
        assert torch.equal(
            tiled.decode(*args, splits=splits, pipelined=True, pdl=True), tiled.decode(*args, splits=splits)
        )
    fresh = torch.randn_like(x["q"])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        x["q"].copy_(fresh)  # the kernel before the scores pass writes what it reads
        out = tiled.decode(*args, splits=splits, pipelined=True, pdl=True)
    x["context_lens"].copy_(torch.tensor([1500, 7, 1999], dtype=torch.int32))
    fresh.copy_(torch.randn_like(fresh))
    graph.replay()
    assert torch.equal(out, tiled.decode(*args, splits=splits))
    with pytest.raises(ValueError, match="pipelined=True"):
        tiled.decode(*args, pdl=True)


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize(("batch", "fits"), [(1, True), (32, False)])
def test_the_dependent_launch_takes_grids_resident_beside_the_scores_pass(batch: int, fits: bool) -> None:
    from engine.cuda import paged_attn_tiled as tiled

    dev = torch.device("cuda")
    q = torch.empty(batch, 16, 128, dtype=torch.bfloat16, device=dev)  # Qwen3-0.6B at context 1024
    cache = torch.empty(1, 32, 8, 128, dtype=torch.bfloat16, device=dev)
    tables = torch.zeros(batch, 33, dtype=torch.int32, device=dev)
    shape = tiled.Shape.of(q, cache, tables)
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    assert (batch * 8 * shape.splits() <= tiled.PDL_BLOCKS_PER_SM * sms) is fits
    assert tiled.supports_pdl(q, cache, tables) is fits


def test_pipelined_launcher_shares_the_argument_checks(compiled) -> None:
    """The pipelined entry point runs the plain one's host checks before any CUDA call (so without a GPU)."""
    import ctypes

    fake = ctypes.c_void_p(16)
    rc = compiled.vt_paged_attn_tiled_pipelined_decode(
        *([fake] * 5), None, *([fake] * 5), 1, 8, 2, 128, 16, 4, ctypes.c_float(0.1), 0, 65, 1, 1, None
    )
    compiled.vt_paged_attn_tiled_last_error.restype = ctypes.c_char_p
    assert rc != 0 and b"num_splits 65 not in [1, 64]" in compiled.vt_paged_attn_tiled_last_error()
