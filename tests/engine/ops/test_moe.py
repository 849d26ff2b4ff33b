"""Tests for engine.ops.moe: fp32 routing and the expert MLP sum, against loops and Hugging Face."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from engine import kernels
from engine.flags import REFERENCE
from tests.engine.host_reads import HostReads

# the table with every kernel off: its entry checks, then the pure-torch reference
moe_experts = partial(kernels.moe_experts, REFERENCE)
moe_route = partial(kernels.moe_route, REFERENCE)


@pytest.mark.parametrize("renormalize", [False, True])
def test_moe_route_matches_python_sort(renormalize, dtype, gen, close):
    logits = (2 * torch.randn(19, 7, generator=gen)).to(dtype)
    weights, ids = moe_route(logits, 3, renormalize, dtype)
    assert weights.shape == ids.shape == (19, 3) and weights.dtype == dtype and ids.dtype == torch.int64
    for t, row in enumerate(logits.double().tolist()):
        exps = [torch.tensor(x).exp().item() for x in row]
        probs = [e / sum(exps) for e in exps]
        order = sorted(range(7), key=lambda e: -probs[e])[:3]
        assert ids[t].tolist() == order
        top = [probs[e] for e in order]
        if renormalize:
            top = [p / sum(top) for p in top]
        close(weights[t], torch.tensor(top, dtype=torch.float64), dtype)


def reference_moe(x, gate_up, down, weights, ids):
    """float64 python loop over tokens and their experts."""
    inter = down.shape[2]
    out = torch.zeros(x.shape, dtype=torch.float64)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            h = gate_up[e].double() @ x[t].double()
            g, u = h[:inter], h[inter:]
            out[t] += weights[t, j].double() * (down[e].double() @ (g * torch.sigmoid(g) * u))
    return out


def test_moe_experts_match_float64_loop(dtype, gen, close):
    tokens, hidden, inter, experts, top_k = 19, 38, 7, 5, 2
    x = torch.randn(tokens, hidden, generator=gen).to(dtype)
    gate_up = (torch.randn(experts, 2 * inter, hidden, generator=gen) / hidden**0.5).to(dtype)
    down = (torch.randn(experts, hidden, inter, generator=gen) / inter**0.5).to(dtype)
    weights, ids = moe_route(torch.randn(tokens, experts, generator=gen).to(dtype), top_k, True, dtype)
    out = moe_experts(x, gate_up, down, weights, ids)
    assert out.shape == x.shape and out.dtype == dtype
    close(out, reference_moe(x, gate_up, down, weights, ids), dtype, "reduction")


@pytest.mark.parametrize("norm_topk_prob", [False, True])
def test_moe_equals_hugging_face_block_bitwise(norm_topk_prob, dtype, gen):
    moe = pytest.importorskip("transformers.models.qwen3_moe.modeling_qwen3_moe")
    config = moe.Qwen3MoeConfig(
        hidden_size=38,
        moe_intermediate_size=19,
        num_experts=7,
        num_experts_per_tok=3,
        norm_topk_prob=norm_topk_prob,
        hidden_act="silu",
    )
    block = moe.Qwen3MoeSparseMoeBlock(config)
    with torch.no_grad():
        block.gate.weight.copy_(torch.randn(7, 38, generator=gen))
        block.experts.gate_up_proj.copy_(torch.randn(7, 38, 38, generator=gen) / 38**0.5)
        block.experts.down_proj.copy_(torch.randn(7, 38, 19, generator=gen) / 19**0.5)
    block = block.to(dtype)
    x = torch.randn(1, 11, 38, generator=gen).to(dtype)
    with torch.no_grad():
        expected = block(x)[0]
        logits = torch.nn.functional.linear(x[0], block.gate.weight)
        weights, ids = moe_route(logits, 3, norm_topk_prob, dtype)
        out = moe_experts(x[0], block.experts.gate_up_proj, block.experts.down_proj, weights, ids)
    assert torch.equal(out, expected)


def test_moe_errors_name_the_tensor(gen):
    x = torch.randn(3, 8, generator=gen)
    gate_up, down = torch.randn(4, 6, 8), torch.randn(4, 8, 3)
    w = torch.rand(3, 2)
    with pytest.raises(ValueError, match="ids: a token selects the same expert twice"):
        moe_experts(x, gate_up, down, w, torch.tensor([[0, 1], [2, 2], [3, 0]]))
    with pytest.raises(IndexError, match=r"ids: values outside \[0, 4\)"):
        moe_experts(x, gate_up, down, w, torch.tensor([[0, 1], [2, 4], [3, 0]]))
    with pytest.raises(ValueError, match="down: dim 2 is 3 but gate_up's I is 4"):
        moe_experts(x, torch.randn(4, 8, 8), down, w, torch.tensor([[0, 1], [2, 1], [3, 0]]))
    with pytest.raises(ValueError, match=r"top_k: 5 not in \[1, num_experts=4\]"):
        moe_route(torch.randn(3, 4), 5, True, torch.float32)


# --- the routed arm (no host read, so a CUDA graph can hold it) -----------------------------------------------

routed = partial(kernels.moe_experts.run_arm, "routed")


def exact_case(gen: torch.Generator, tokens: int, experts: int, top_k: int, dtype: torch.dtype):  # type: ignore[no-untyped-def]
    """Inputs whose every GEMM is exact in fp32 and bf16 (small integers; `down` has one nonzero per row), so a
    GEMM's rounding cannot depend on its row count: what is left to differ is routing, weighting, the sum order
    and its roundings. Router logits are small integers: many ties, broken by torch.topk."""
    hidden, inter = 16, int(torch.randint(1, 24, (1,), generator=gen))
    x = torch.randint(-2, 3, (tokens, hidden), generator=gen).to(dtype)
    gate_up = torch.randint(-2, 3, (experts, 2 * inter, hidden), generator=gen).to(dtype)
    down = torch.zeros(experts, hidden, inter)
    where = torch.randint(0, inter, (experts, hidden, 1), generator=gen)
    down.scatter_(2, where, torch.randint(-2, 3, (experts, hidden, 1), generator=gen).float())
    logits = torch.randint(-2, 3, (tokens, experts), generator=gen).to(dtype)
    weights, ids = moe_route(logits, top_k, bool(tokens % 2), dtype)
    return x, gate_up, down.to(dtype), weights, ids


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("seed", range(6))
def test_routed_arm_equals_the_reference_bitwise_where_the_gemms_are_exact(seed: int, dtype) -> None:
    gen = torch.Generator().manual_seed(seed)
    drawn = every = 0
    for tokens in range(1, 65):
        experts = int(torch.randint(2, 33, (1,), generator=gen))
        top_k = int(torch.randint(1, experts + 1, (1,), generator=gen))
        x, gate_up, down, weights, ids = exact_case(gen, tokens, experts, top_k, dtype)
        expected = moe_experts(x, gate_up, down, weights, ids)
        assert torch.equal(routed(x, gate_up, down, weights, ids), expected), (tokens, experts, top_k)
        if 2 * tokens * top_k <= experts:
            drawn += 1
        else:
            every += 1
    assert drawn and every  # both of the arm's ways ran (few tokens: the drawn experts'; more: every expert)


@pytest.mark.parametrize("tokens", [1, 2, 7, 64])
def test_routed_arm_is_within_gemm_rounding_of_the_reference(tokens: int, dtype, gen, close) -> None:
    """Random weights: only the GEMMs' row counts differ (a CPU GEMM's rounding depends on its row count)."""
    hidden, inter, experts, top_k = 38, 19, 9, 3
    x = torch.randn(tokens, hidden, generator=gen).to(dtype)
    gate_up = (torch.randn(experts, 2 * inter, hidden, generator=gen) / hidden**0.5).to(dtype)
    down = (torch.randn(experts, hidden, inter, generator=gen) / inter**0.5).to(dtype)
    weights, ids = moe_route(torch.randn(tokens, experts, generator=gen).to(dtype), top_k, True, dtype)
    close(routed(x, gate_up, down, weights, ids), moe_experts(x, gate_up, down, weights, ids), dtype, "reduction")


def test_routed_arm_reads_nothing_on_the_host_and_the_reference_does(gen) -> None:
    x, gate_up, down, weights, ids = exact_case(gen, 5, 6, 2, torch.float32)
    for arm in (
        lambda: routed(x, gate_up, down, weights, ids),
        lambda: routed(x[:1], gate_up, down, weights[:1], ids[:1]),
    ):
        with HostReads() as mode:
            arm()
        assert mode.seen == []
    with HostReads() as mode:  # teeth: the detector sees the reference's grouping by expert
        moe_experts(x, gate_up, down, weights, ids)
    assert {"Tensor.tolist", "Tensor.__int__", "aten._unique2.default"} <= set(mode.seen), mode.seen


def test_the_routed_arm_takes_cuda_decode_batches_at_the_default_flags() -> None:
    """The arms' order and gates: the kernel only with VT_MOE_KERNELS (off by default), then the routed arm for
    every batch up to the largest captured decode batch (so the step can be captured); past it (a prefill) the
    reference."""
    from engine.flags import FlagSnapshot

    op = kernels.moe_experts
    assert [a.name for a in op.arms] == ["cuda", "routed"]
    assert op.arm("routed").flags == ()  # on whenever VT_KERNELS is
    from engine.runner import GRAPH_BATCH_SIZES

    assert op.arm("routed").supports(torch.empty(max(GRAPH_BATCH_SIZES), 8), None, None, None, None)
    assert not op.arm("routed").supports(torch.empty(257, 8), None, None, None, None)
    assert not FlagSnapshot.defaults().enabled("VT_MOE_KERNELS")  # the kernel is opt-in: the routed arm is the default
