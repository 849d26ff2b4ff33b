"""The varlen prefill/extend attention arms (VT_PREFILL_ATTN): compile (nvcc), the table's rows and the fp32
arm's per-token lengths (CPU), and on a GPU every numerics case of lab/gates/cases/prefill.py, prefill
equal to extend over the same K/V bit for bit, and capture in a CUDA graph without a host read."""

from __future__ import annotations

import pytest
import torch

from engine import kernels
from engine.flags import FlagSnapshot
from engine.ops import kv_store
from engine.ops import paged_attn as ref
from lab.gates import numerics
from lab.gates.cases import prefill as cases

FAMILY = "prefill_attn"  # the conftest's `cuda` and `compiled` fixtures read these
KERNELS = "the prefill attention kernels"


def test_source_compiles_and_exports_its_launcher(compiled) -> None:
    for symbol in ("vt_prefill_attn", "vt_prefill_attn_last_error"):
        assert hasattr(compiled, symbol), symbol


def test_supported_shapes() -> None:
    from engine.cuda import prefill_attn

    assert prefill_attn.supports(32, torch.bfloat16) and prefill_attn.supports(256, torch.float16)
    assert not prefill_attn.supports(96, torch.bfloat16)
    assert not prefill_attn.supports(128, torch.float32)  # fp32 takes the decode_rows arm


def test_the_arms_are_on_by_default_and_ordered() -> None:
    """ON since VT_PREFILL_ATTN's flip; VT_PREFILL_ATTN=0 is the rollback to the reference."""
    off = FlagSnapshot.defaults().with_(VT_PREFILL_ATTN=False)
    assert [a.name for a in kernels.extend_attention.arms] == ["mma", "decode_rows"]
    assert [a.name for a in kernels.prefill_attention.arms] == ["mma"]
    for arm in kernels.extend_attention.arms + kernels.prefill_attention.arms:
        assert arm.flags == ("VT_PREFILL_ATTN",)
        assert arm.enabled(FlagSnapshot.defaults()) and not arm.enabled(off)


def test_the_cases_cover_the_shapes_and_reference_runs_on_the_cpu() -> None:
    names = [c.name for c in cases.CASES]
    for part in ("/d32/", "/d64/", "/d128/", "/d256/", "/bf16/", "/fp16/", "/fp32/", "/w1", "/strided", "/g8/"):
        assert any(part in n for n in names), part
    assert {c.arm for c in cases.CASES} == {"extend_mma", "prefill_mma", "extend_decode_rows"}
    small = next(c for c in cases.CASES if "small" in c.tags)
    x = small.make(0, torch.device("cpu"))
    assert x["device_lens"].tolist() == [x["seq_lens"], x["prefix_lens"]]
    out = small.reference(x)
    assert out.shape == x["q"].shape and torch.isfinite(out.float()).all()


def test_decode_rows_lengths_are_each_tokens_position_plus_one() -> None:
    lens = torch.tensor([[2, 1, 3], [5, 0, 1]], dtype=torch.int32)
    seq, ctx = kernels.decode_row_lens(lens, 6)
    assert seq.tolist() == [0, 0, 1, 2, 2, 2]
    assert ctx.tolist() == [6, 7, 1, 2, 3, 4]


def test_device_lens_must_match_the_lists() -> None:
    x = cases.varlen_inputs(
        1,
        torch.device("cpu"),
        dtype=torch.float32,
        rows=((3, 2), (4, 0)),
        d=32,
        group=2,
        block_size=16,
        window=None,
        strided=False,
    )
    args = (x["q"], x["k_cache"], x["v_cache"], x["block_tables"], x["seq_lens"], x["prefix_lens"], x["scale"])
    with pytest.raises(ValueError, match=r"^device_lens: expected \[2, 2\] int32"):
        ref.check_extend_attention(*args, device_lens=x["device_lens"][:1])
    with pytest.raises(TypeError, match="^device_lens: dtype int64"):
        ref.check_extend_attention(*args, device_lens=x["device_lens"].long())


@pytest.mark.gpu
@pytest.mark.parametrize("case", cases.CASES, ids=lambda c: c.name)
def test_case_within_tolerance(cuda: torch.device, case) -> None:
    x = case.make(0, cuda)
    got = numerics.compare(case.kernel(x), case.reference_output(x), numerics.TOLERANCES[case.tolerance])
    assert got.passed, f"{case.name}: {got}"


def _stored(x: dict, cuda: torch.device) -> dict:
    """Prompts only (prefix 0) with their own K/V stored in the cache at their table's slots."""
    bs = x["k_cache"].shape[1]
    slots = [int(x["block_tables"][b, p // bs]) * bs + p % bs for b, n in enumerate(x["seq_lens"]) for p in range(n)]
    kv_store.store_kv(x["k"], x["v"], x["k_cache"], x["v_cache"], torch.tensor(slots, device=cuda))
    return x


@pytest.mark.gpu
def test_prefill_equals_extend_over_the_same_keys_bitwise(cuda: torch.device) -> None:
    rows = tuple((n, 0) for n in cases.PREFILLS)
    for dtype in (torch.bfloat16, torch.float16):
        x = _stored(
            cases.varlen_inputs(
                2, cuda, dtype=dtype, rows=rows, d=128, group=2, block_size=16, window=None, strided=True
            ),
            cuda,
        )
        assert torch.equal(cases.run_prefill(x), cases.run_extend("mma", x))


@pytest.mark.gpu
def test_extend_captures_in_a_cuda_graph(cuda: torch.device) -> None:
    x = cases.varlen_inputs(
        3, cuda, dtype=torch.bfloat16, rows=cases.MIXED, d=128, group=2, block_size=16, window=None, strided=False
    )
    eager = cases.run_extend("mma", x)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = cases.run_extend("mma", x)
    x["q"].mul_(0.5)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, cases.run_extend("mma", x)) and not torch.equal(out, eager)
