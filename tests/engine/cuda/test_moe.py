"""Tests for the MoE kernels (engine/cuda/moe.cu) against engine.ops.moe on the GPU, and an nvcc compile check."""

from __future__ import annotations

import pytest
import torch

from engine import kernels
from engine.cuda import build
from engine.flags import FlagSnapshot
from engine.ops.moe import moe_experts, moe_experts_routed, moe_route
from lab.gates.cases.moe import dense_routing, distinct_logits
from tests.engine.cuda.nvcc_strict import compile_strict, needs_nvcc

gpu = pytest.mark.gpu
# (atol, rtol) per dtype for the grouped GEMMs: fp32 accumulation in another order than the reference
# moves a rounded intermediate by one ulp now and then.
GEMM_TOL = {torch.float32: (1e-5, 1e-4), torch.bfloat16: (3e-2, 3e-2), torch.float16: (5e-3, 5e-3)}


@pytest.fixture
def cuda() -> torch.device:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the MoE kernels run only on a GPU")
    return torch.device("cuda")


def reference_align(ids: torch.Tensor, experts: int, block: int) -> tuple[list[int], list[int]]:
    """Python grouping: per expert its flat indices ascending, padded with numel to a block multiple."""
    flat = ids.flatten().tolist()
    rows: list[int] = []
    offsets = [0]
    for e in range(experts):
        mine = [i for i, x in enumerate(flat) if x == e]
        rows += mine + [len(flat)] * (-len(mine) % block)
        offsets.append(len(rows))
    return rows, offsets


@needs_nvcc
def test_moe_source_compiles_without_warnings(sm90_werror_dir):
    assert compile_strict("moe.cu", sm90_werror_dir).stat().st_size > 0


def test_experts_names_the_tensor_with_a_wrong_dtype():
    from engine.cuda import moe

    x = torch.randn(3, 8, dtype=torch.bfloat16)
    gate_up = torch.randn(4, 6, 8, dtype=torch.float32)
    with pytest.raises(TypeError, match="gate_up: expected dtype torch.bfloat16"):
        moe.experts(
            x, gate_up, torch.randn(4, 8, 3, dtype=torch.bfloat16), x[:, :2], torch.zeros(3, 2, dtype=torch.int64)
        )


@gpu
@pytest.mark.parametrize("tokens,experts,top_k", [(7, 60, 4), (83, 128, 8), (1, 19, 1)])
@pytest.mark.parametrize("renormalize", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_route_matches_reference(cuda, tokens, experts, top_k, renormalize, dtype):
    from engine.cuda import moe

    logits = distinct_logits(tokens, experts, torch.Generator().manual_seed(tokens + experts)).to(dtype).to(cuda)
    weights, ids = moe.route(logits, top_k, renormalize, dtype)
    ref_w, ref_ids = moe_route(logits, top_k, renormalize, dtype)
    assert torch.equal(ids, ref_ids)
    torch.testing.assert_close(weights.float(), ref_w.float(), atol=1e-6, rtol=1e-5 if dtype == torch.float32 else 8e-3)


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_route_on_random_logits_selects_what_the_reference_selects(cuda, dtype):
    """bf16 logits tie often; whatever order torch.topk gives equal weights, the chosen set and weights agree
    (on rows where no tie straddles the k-th place, which the reference leaves unspecified)."""
    from engine.cuda import moe

    logits = (3 * torch.randn(83, 128, generator=torch.Generator().manual_seed(1))).to(dtype).to(cuda)
    weights, ids = moe.route(logits, 8, True, dtype)
    ref_w, ref_ids = moe_route(logits, 8, True, dtype)
    probs, order = torch.sort(torch.softmax(logits.float(), -1), dim=-1, descending=True, stable=True)
    clear = probs[:, 7] != probs[:, 8]
    assert clear.sum() > 40
    torch.testing.assert_close(
        dense_routing(weights, ids, 128)[clear].float(),
        dense_routing(ref_w, ref_ids, 128)[clear].float(),
        atol=1e-6,
        rtol=1e-5 if dtype == torch.float32 else 8e-3,
    )
    assert torch.equal(ids, order[:, :8]), "equal probabilities must come in ascending expert id"


@gpu
def test_route_breaks_ties_by_lower_expert_id(cuda):
    from engine.cuda import moe

    # Four equal logits per row: a stable descending sort keeps the lower ids first.
    logits = torch.randn(5, 11, device=cuda)
    logits[:, [2, 5, 7, 9]] = 10.0
    weights, ids = moe.route(logits, 3, True, torch.float32)
    expect = torch.sort(torch.softmax(logits, -1), dim=-1, descending=True, stable=True).indices[:, :3]
    assert torch.equal(ids, expect)
    assert ids[0].tolist() == [2, 5, 7]


@gpu
@pytest.mark.parametrize(
    "tokens,experts,top_k,block", [(7, 5, 2, 16), (83, 128, 8, 16), (300, 19, 3, 4), (1, 3, 1, 16)]
)
def test_align_groups_stably_and_pads(cuda, tokens, experts, top_k, block):
    from engine.cuda import moe

    gen = torch.Generator(device=cuda).manual_seed(tokens + experts)
    ids = torch.stack([torch.randperm(experts, generator=gen, device=cuda)[:top_k] for _ in range(tokens)])
    al = moe.align(ids, experts, block)
    rows, offsets = reference_align(ids.cpu(), experts, block)
    assert al.offsets.tolist() == offsets
    assert al.sorted_ids[: len(rows)].tolist() == rows
    assert (al.sorted_ids[len(rows) :] == tokens * top_k).all()
    blocks = al.block_expert.tolist()
    for b, e in enumerate(blocks):
        start = b * block
        expect = next((x for x in range(experts) if offsets[x] <= start < offsets[x + 1]), -1)
        assert e == expect, f"block {b}"


@gpu
@pytest.mark.parametrize(
    "tokens,hidden,inter,experts,top_k", [(7, 96, 40, 9, 3), (1, 256, 128, 16, 4), (33, 83, 19, 5, 2)]
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_experts_match_reference(cuda, tokens, hidden, inter, experts, top_k, dtype):
    from engine.cuda import moe

    gen = torch.Generator(device=cuda).manual_seed(hidden * inter)
    x = torch.randn(tokens, hidden, generator=gen, device=cuda).to(dtype)
    gate_up = (torch.randn(experts, 2 * inter, hidden, generator=gen, device=cuda) / hidden**0.5).to(dtype)
    down = (torch.randn(experts, hidden, inter, generator=gen, device=cuda) / inter**0.5).to(dtype)
    weights, ids = moe_route(torch.randn(tokens, experts, generator=gen, device=cuda), top_k, True, dtype)
    out = moe.experts(x, gate_up, down, weights, ids)
    ref = moe_experts(x, gate_up, down, weights, ids)
    assert out.dtype == dtype and out.shape == ref.shape
    atol, rtol = GEMM_TOL[dtype]
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=rtol)
    if dtype != torch.float32:  # the rounding points are the reference's, so most elements agree exactly
        assert (out == ref).float().mean() > 0.5


@gpu
def test_experts_detect_a_wrong_expert(cuda):
    """The comparison has teeth: routing one slot to another expert moves that token's row only."""
    from engine.cuda import moe

    gen = torch.Generator(device=cuda).manual_seed(7)
    x = torch.randn(5, 64, generator=gen, device=cuda, dtype=torch.bfloat16)
    gate_up = torch.randn(4, 64, 64, generator=gen, device=cuda, dtype=torch.bfloat16) / 8
    down = torch.randn(4, 64, 32, generator=gen, device=cuda, dtype=torch.bfloat16) / 6
    weights, ids = moe_route(torch.randn(5, 4, generator=gen, device=cuda), 2, True, torch.bfloat16)
    bad = ids.clone()
    bad[3, 0] = next(e for e in range(4) if e not in ids[3].tolist())
    diff = (moe.experts(x, gate_up, down, weights, bad) - moe_experts(x, gate_up, down, weights, ids)).abs().amax(-1)
    assert diff[3] > 0.05 and diff[[0, 1, 2, 4]].max() < 0.05


def test_binding_argtypes_match_the_launchers():
    from engine.cuda import moe
    from tests.engine.cuda.signatures import exported

    launchers = exported(build.CUDA_DIR / "moe.cu")
    for name, argtypes in moe.SIGNATURES.items():
        assert argtypes == launchers[name], name


def test_binding_limits_match_the_kernel_header():
    import re

    from engine.cuda import moe

    header = (build.CUDA_DIR / "moe.cuh").read_text()
    per_lane = int(re.search(r"kRouteMaxExpertsPerLane = (\d+);", header).group(1))
    assert moe.MAX_ROUTE_EXPERTS == 32 * per_lane
    assert moe.MAX_TOP_K == int(re.search(r"kMaxTopK = (\d+);", header).group(1))
    assert moe.MAX_ALIGN_EXPERTS == int(re.search(r"kMaxAlignExperts = (\d+);", header).group(1))
    assert moe.supports(128, 8) and not moe.supports(moe.MAX_ROUTE_EXPERTS + 1, 8) and not moe.supports(64, 33)


@pytest.mark.parametrize("flag", [False, True])
def test_public_ops_on_cpu_tensors_run_the_reference_whatever_the_flag(flag):
    logits = distinct_logits(5, 9, torch.Generator().manual_seed(2))
    weights, ids = kernels.moe_route(FlagSnapshot.defaults().with_(VT_MOE_KERNELS=flag), logits, 3, True, torch.float32)
    probs = torch.softmax(logits, -1)
    expect = torch.sort(probs, dim=-1, descending=True, stable=True)
    assert torch.equal(ids, expect.indices[:, :3])
    torch.testing.assert_close(weights, expect.values[:, :3] / expect.values[:, :3].sum(-1, keepdim=True))


@gpu
def test_public_ops_dispatch_to_the_kernels_under_the_flag(cuda):
    from engine.cuda import moe

    gen = torch.Generator().manual_seed(4)
    x = torch.randn(3, 64, generator=gen).to(torch.bfloat16).to(cuda)
    gate_up = (torch.randn(6, 48, 64, generator=gen) / 8).to(torch.bfloat16).to(cuda)
    down = (torch.randn(6, 64, 24, generator=gen) / 5).to(torch.bfloat16).to(cuda)
    logits = distinct_logits(3, 6, gen).to(cuda)
    on = FlagSnapshot.defaults().with_(VT_MOE_KERNELS=True)
    kernels.reset_counts()
    weights, ids = kernels.moe_route(on, logits, 2, True, torch.bfloat16)
    assert all(torch.equal(a, b) for a, b in zip((weights, ids), moe.route(logits, 2, True, torch.bfloat16)))
    got = kernels.moe_experts(on, x, gate_up, down, weights, ids)
    assert torch.equal(got, moe.experts(x, gate_up, down, weights, ids))
    ref = kernels.moe_experts(on.with_(VT_KERNELS=False), x, gate_up, down, weights, ids)  # the master switch
    assert torch.equal(ref, moe_experts(x, gate_up, down, weights, ids))
    # without the flag a decode batch takes the routed arm (no host read: capturable), not the reference
    routed = kernels.moe_experts(on.with_(VT_MOE_KERNELS=False), x, gate_up, down, weights, ids)
    assert torch.equal(routed, moe_experts_routed(x, gate_up, down, weights, ids))
    assert kernels.counts().ran == {
        ("moe_route", "cuda"): 1,
        ("moe_experts", "cuda"): 1,
        ("moe_experts", "reference"): 1,
        ("moe_experts", "routed"): 1,
    }
