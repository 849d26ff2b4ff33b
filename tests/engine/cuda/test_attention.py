"""Paged decode attention and split-KV kernels against the torch references (GPU), and the binding's checks (CPU)."""

from __future__ import annotations

import pytest
import torch

from engine import kernels
from engine.flags import REFERENCE, FlagSnapshot
from engine.ops import paged_attn as ref
from lab.gates import numerics
from lab.gates.cases import attention as cases

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the kernels run on a GPU")
ATTN = [c for c in cases.CASES if c.name.startswith("attn/") and "long" not in c.tags]
LONG = [c for c in cases.CASES if c.name.startswith("attn/") and "long" in c.tags and "ctx4096" in c.name]


def small_inputs(device: str = "cpu", d: int = 128, group: int = 4) -> dict:
    return cases.paged_inputs(
        5, torch.device(device), dtype=torch.bfloat16, ctx=33, d=d, group=group, block_size=16, window=None
    )


def test_arm_choice_follows_the_flags() -> None:
    # the whole precedence is tested on the CPU in tests/engine/test_kernels.py (the by-name arms in
    # tests/engine/test_kernels_by_name.py); here: the arms are the table's
    assert [a.name for a in kernels.paged_decode_attention.arms] == [
        "tiled_onepass",
        "tiled_fused",
        "tiled_pipelined_pdl",
        "tiled_pipelined",
        "tiled",
        "generic",
    ]
    assert [a.name for a in kernels.paged_decode_attention.by_name] == ["splitkv_swap", "warp_d128"]


def test_binding_errors_name_the_tensor() -> None:
    from engine.cuda import paged_attn as pa

    x = small_inputs()
    with pytest.raises(ValueError, match=r"k_cache: shape .* does not fit q"):
        pa.check_inputs(x["q"][..., :64].contiguous(), x["k_cache"], x["v_cache"], x["block_tables"], x["context_lens"])
    with pytest.raises(TypeError, match="v_cache: expected dtype torch.bfloat16"):
        pa.check_inputs(x["q"], x["k_cache"], x["v_cache"].float(), x["block_tables"], x["context_lens"])
    with pytest.raises(ValueError, match="context_lens: expected 1 dims"):
        pa.check_inputs(x["q"], x["k_cache"], x["v_cache"], x["block_tables"], x["context_lens"][None])
    with pytest.raises(ValueError, match="q: must be contiguous"):
        pa.check_inputs(x["q"].transpose(0, 1), x["k_cache"], x["v_cache"], x["block_tables"], x["context_lens"])


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("case", ATTN + LONG, ids=lambda c: c.name)
def test_arm_matches_reference(case) -> None:
    x = case.make(0, torch.device("cuda"))
    got = numerics.compare(case.kernel(x), case.reference_output(x), numerics.TOLERANCES[case.tolerance])
    assert got.passed, got


@needs_gpu
@pytest.mark.gpu
def test_every_arm_sees_a_changed_value_in_the_window_only() -> None:
    """Changing V at a position outside the sliding window must not move the output; inside, it must."""
    from engine.cuda import paged_attn as pa

    x = cases.paged_inputs(
        9, torch.device("cuda"), dtype=torch.float32, ctx=100, d=128, group=4, block_size=16, window=40
    )
    args = (x["q"], x["k_cache"], x["v_cache"], x["block_tables"], x["context_lens"], x["scale"], 40)
    for arm in (pa.GENERIC, pa.WARP):
        base = pa.paged_decode_attention(*args, arm=arm)
        for pos, moves in ((59, False), (60, True)):  # sequence 0 attends positions 60..99
            v = x["v_cache"].clone()
            blk = int(x["block_tables"][0, pos // 16])
            v[blk, pos % 16] += 3.0
            out = pa.paged_decode_attention(*args[:2], v, *args[3:], arm=arm)
            assert bool((out[0] != base[0]).any()) == moves, (arm, pos)
            assert torch.equal(out[1:], base[1:])  # other sequences never read that block


@needs_gpu
@pytest.mark.gpu
def test_split_count_heuristic() -> None:
    from engine.cuda import splitkv

    assert splitkv.num_splits(rows=64, max_context=100, sm_count=132) == 1  # short: unsplit
    assert splitkv.num_splits(rows=64, max_context=32768, sm_count=132) == 5  # ceil(264 / 64)
    assert splitkv.num_splits(rows=2, max_context=32768, sm_count=132) == 64  # clamped
    assert splitkv.num_splits(rows=16, max_context=1000, sm_count=132) == 4  # by the work: ceil(1000 / 256)


@needs_gpu
@pytest.mark.gpu
def test_launcher_rejects_bad_arguments_with_its_message() -> None:
    from engine.cuda import paged_attn as pa

    x = small_inputs("cuda", d=64)
    with pytest.raises(ValueError, match="arm 1 does not support head_dim 64"):
        pa.paged_decode_attention(
            x["q"], x["k_cache"], x["v_cache"], x["block_tables"], x["context_lens"], x["scale"], arm=pa.WARP
        )
    lib = pa._lib()
    rc = lib.vt_paged_attn_decode(None, None, None, None, None, None, None, 1, 6, 4, 64, 16, 3, 1.0, 0, 0, 1, None)
    with pytest.raises(RuntimeError, match="num_q_heads 6 is not a multiple of num_kv_heads 4"):
        from engine.cuda import ffi

        ffi.check(rc, "vt_paged_attn_decode", lib, "paged_attn")


def test_reference_window_semantics_match_the_cases() -> None:
    """The cases' window argument means the W most recent positions, as the reference defines it."""
    x = small_inputs()
    full = ref.paged_decode_attention(
        x["q"], x["k_cache"], x["v_cache"], x["block_tables"], x["context_lens"], x["scale"], 1000
    )
    none = ref.paged_decode_attention(
        x["q"], x["k_cache"], x["v_cache"], x["block_tables"], x["context_lens"], x["scale"], None
    )
    assert torch.equal(full, none)


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize(
    "arm, env, named",
    [
        ("generic", {"VT_ATTN_TILED": False}, None),
        ("tiled", {"VT_ATTN_TILED": True, "VT_ATTN_ONEPASS": False, "VT_ATTN_PV_PIPELINED": False}, None),
        ("tiled_pipelined", {"VT_ATTN_TILED": True, "VT_ATTN_ONEPASS": False, "VT_ATTN_PDL": False}, None),
        ("tiled_pipelined_pdl", {"VT_ATTN_TILED": True, "VT_ATTN_ONEPASS": False, "VT_ATTN_PDL": True}, None),
        ("tiled_onepass", {}, None),  # the default
        ("splitkv_swap", {}, "splitkv_swap"),  # by name, at the default flags
        ("warp_d128", {}, "warp_d128"),
    ],
)
def test_dispatch_by_flags_or_name_stays_within_tolerance(arm: str, env: dict, named: str | None) -> None:
    x = cases.paged_inputs(
        11,
        torch.device("cuda"),
        dtype=torch.bfloat16,
        ctx=685,
        d=128 if named else 256,
        group=4,
        block_size=16,
        window=None,
    )
    snap = FlagSnapshot.defaults().with_(**env)
    if named:
        snap = kernels.naming(snap, "paged_decode_attention", named)
    kernels.reset_counts()
    out = kernels.paged_decode_attention(snap, *cases._args(x), None)
    assert kernels.counts().ran == {("paged_decode_attention", arm): 1}
    got = numerics.compare(out, cases.ref_eager(x), numerics.TOLERANCES["bf16"])
    assert got.passed, got


@needs_gpu
@pytest.mark.gpu
def test_public_op_runs_the_generic_kernel_on_a_gpu() -> None:
    from engine.cuda import paged_attn as pa

    x = cases.paged_inputs(
        12, torch.device("cuda"), dtype=torch.float32, ctx=100, d=128, group=4, block_size=32, window=None
    )  # fp32: the kernel and the reference differ in the last bits
    op = kernels.paged_decode_attention
    assert torch.equal(op(FlagSnapshot.defaults(), *cases._args(x)), pa.paged_decode_attention(*cases._args(x)))
    expected = op(REFERENCE, *cases._args(x))
    got = numerics.compare(pa.paged_decode_attention(*cases._args(x)), expected, numerics.TOLERANCES["fp32"])
    assert got.passed and got.bitwise_equal_pct < 100.0, got  # the op ran the reference this time


def test_exact_sum_reference_keeps_the_eager_rounding_points_and_the_window() -> None:
    """The long-gate cases' exact-sum reference: the eager reference's results to within the order of its sums
    (a few elements one ulp apart), and a window one key wider than asked shows."""
    x = cases.paged_inputs(
        3, torch.device("cpu"), dtype=torch.bfloat16, ctx=300, d=128, group=4, block_size=16, window=40
    )
    exact = cases.ref_exact_sums(x)
    got = numerics.compare(cases.ref_eager(x), exact, numerics.TOLERANCES["bf16"])
    assert got.passed and got.bitwise_equal_pct > 99.0, got
    wide = numerics.compare(cases.ref_exact_sums({**x, "window": 41}), exact, numerics.TOLERANCES["exact"])
    assert wide.bitwise_equal_pct < 50.0, wide


def test_long_gate_cases_are_the_gate_models_decode_shape() -> None:
    long = [c for c in cases.CASES if "long-gate" in c.tags]
    assert {c.name.split("/")[1] for c in long} == {
        "tiled",
        "tiled-s13-vs-s1",
        "tiled-vs-exact",
        "eager-vs-exact",
        "tiled_onepass",
    }
    x = long[0].make(0, torch.device("cpu"))
    assert x["q"].shape == (16, 8, 128) and x["k_cache"].shape[1:] == (16, 2, 128)
    assert 1580 in x["context_lens"].tolist() and x["block_tables"].shape == (16, cases.LONG_GATE_BLOCKS)
    assert any(c.make.keywords["window"] == 40 for c in long)  # type: ignore[attr-defined]
