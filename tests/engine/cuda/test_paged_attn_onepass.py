"""The one-pass paged decode attention arm: compile (nvcc), the split-count rule and the host checks (no GPU),
routing by VT_ATTN_ONEPASS (CPU), and on a GPU split-count agreement, the window, the folded combine and
capture in a CUDA graph. Its numerics cases (lab/gates/cases/attention.py, arm "tiled_onepass") run in
test_attention.py."""

from __future__ import annotations

import ctypes

import pytest
import torch

from lab.gates import numerics
from lab.gates.cases import attention as cases

FAMILY = "paged_attn_onepass"  # the conftest's `cuda` and `compiled` fixtures read these
KERNELS = "the one-pass attention kernel"

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the kernel runs on a GPU")


def test_source_compiles_and_exports_its_launchers(compiled) -> None:
    for symbol in (
        "vt_paged_attn_onepass_decode",
        "vt_paged_attn_onepass_num_splits",
        "vt_paged_attn_onepass_split_rule",
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
    assert not onepass.supports(256, 4, torch.bfloat16)  # the two-pass arms are faster there
    assert not onepass.supports(128, 9, torch.bfloat16)  # more rows than the 8 live rows of the mma tile
    assert not onepass.supports(128, 4, torch.float32)


def test_the_table_takes_the_onepass_arm_first_only_when_flagged() -> None:
    from engine import kernels
    from engine.flags import FlagSnapshot

    op, on = kernels.paged_decode_attention, FlagSnapshot.defaults()
    first = op.arms[0]
    assert first.name == "tiled_onepass" and not first.enabled(on)  # first, but OFF by default
    assert first.enabled(on.with_(VT_ATTN_ONEPASS=True))
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


def test_binding_refuses_head_dim_256_naming_it() -> None:
    from engine.cuda import paged_attn_onepass as onepass

    x = cases.paged_inputs(
        2, torch.device("cpu"), dtype=torch.bfloat16, ctx=40, d=256, group=4, block_size=16, window=None
    )
    with pytest.raises(ValueError, match=r"one-pass arm takes head_dim in \(64, 128\); got head_dim 256"):
        onepass.decode(*cases._args(x))


def _kernel_names(run) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("window", [None, 100])
def test_split_counts_agree_in_one_launch(window: int | None) -> None:
    """Every split count gives the one-split output within bf16, in one kernel launch, and leaves the arrival
    counters zero for the next launch."""
    from engine.cuda import paged_attn_onepass as onepass
    from engine.cuda import paged_attn_tiled as tiled

    x = cases.paged_inputs(
        4, torch.device("cuda"), dtype=torch.bfloat16, ctx=3000, d=128, group=4, block_size=32, window=window
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
def test_only_positions_in_the_window_move_the_output() -> None:
    from engine.cuda import paged_attn_onepass as onepass

    x = cases.paged_inputs(
        9, torch.device("cuda"), dtype=torch.bfloat16, ctx=100, d=128, group=4, block_size=16, window=40
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
def test_replays_in_a_cuda_graph_with_new_lengths() -> None:
    """No host read of the context lengths: the graph replays correctly after the lengths change in place."""
    from engine.cuda import paged_attn_onepass as onepass

    x = cases.paged_inputs(
        6, torch.device("cuda"), dtype=torch.bfloat16, ctx=2000, d=128, group=4, block_size=32, window=None
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
