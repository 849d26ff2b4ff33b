"""Tests for engine.ops.moe: fp32 routing and the expert MLP sum, against loops and Hugging Face."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from engine import kernels
from engine.flags import REFERENCE

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
