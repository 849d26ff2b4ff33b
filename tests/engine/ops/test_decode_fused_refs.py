"""The references of the decode step's fused ops (engine/ops/gemv.py, engine/ops/rope.py): each is its parts in order."""

from __future__ import annotations

import pytest
import torch

from engine.ops import act, gemv, kv_store, norm, rope

EPS = 1e-6


def test_add_rms_norm_linear_is_the_pre_norm_then_the_projection():
    g = torch.Generator().manual_seed(0)
    x, res = torch.randn(3, 64, generator=g).bfloat16(), torch.randn(3, 64, generator=g).bfloat16()
    nw, w = torch.rand(64, generator=g).bfloat16(), torch.randn(19, 64, generator=g).bfloat16()
    y, new_res = gemv.add_rms_norm_linear(x, res, nw, EPS, w)
    normed, want_res = norm.fused_add_rms_norm(x, res, nw, EPS)
    assert torch.equal(new_res, want_res) and torch.equal(y, gemv.linear(normed, w))
    y0, res0 = gemv.add_rms_norm_linear(x, None, nw, EPS, w)  # the first layer: the norm of x alone, x the residual
    assert res0 is x and torch.equal(y0, gemv.linear(norm.rms_norm(x, nw, EPS), w))


def test_silu_mul_linear_is_the_activation_then_the_projection():
    g = torch.Generator().manual_seed(1)
    gate_up, w = torch.randn(2, 38, generator=g), torch.randn(7, 19, generator=g)
    assert torch.equal(gemv.silu_mul_linear(gate_up, w), gemv.linear(act.silu_and_mul(gate_up), w))


def test_qkv_norm_rope_store_rotates_q_and_k_and_stores_k_and_v_skipping_padding():
    g = torch.Generator().manual_seed(2)
    t, hq, hkv, d = 3, 4, 2, 8
    merged = torch.randn(t, (hq + 2 * hkv) * d, generator=g)
    q, k, v = (p.view(t, -1, d) for p in merged.split((hq * d, hkv * d, hkv * d), dim=-1))
    qw, kw = torch.rand(d, generator=g) + 0.5, torch.rand(d, generator=g) + 0.5
    cos, sin = rope.rope_cos_sin(torch.tensor([5, 9, 40]), d, 1e6, torch.float32)
    k_cache, v_cache = torch.zeros(2, 4, hkv, d), torch.zeros(2, 4, hkv, d)
    slots = torch.tensor([6, -1, 1])
    q_out, k_out = rope.qkv_norm_rope_store(q, k, v, qw, kw, cos, sin, EPS, k_cache, v_cache, slots)
    assert torch.equal(q_out, rope.qk_norm_rope(q, qw, cos, sin, EPS))
    assert torch.equal(k_out, rope.qk_norm_rope(k, kw, cos, sin, EPS))
    want_k, want_v = torch.zeros_like(k_cache), torch.zeros_like(v_cache)
    kv_store.store_kv(k_out, v, want_k, want_v, slots)
    assert torch.equal(k_cache, want_k) and torch.equal(v_cache, want_v)
    flat = k_cache.view(8, hkv, d)
    assert torch.equal(flat[6], k_out[0]) and torch.equal(flat[1], k_out[2])
    assert flat[[0, 2, 3, 4, 5, 7]].abs().sum() == 0  # the padding token stored nothing


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("tokens,hq,hkv,d", [(1, 4, 2, 32), (7, 16, 8, 128), (33, 14, 2, 64), (300, 8, 1, 256)])
def test_the_reference_runs_q_and_k_as_one_and_gives_each_calls_bits(dtype, tokens, hq, hkv, d):
    """The reference composite norms and rotates q and k side by side (one norm, one RoPE): every value must be the
    one the two qk_norm_rope calls give, for decode rows and prefills, GQA groups 1-8, head dims 32-256."""
    g = torch.Generator().manual_seed(tokens)
    merged = (torch.randn(tokens, (hq + 2 * hkv) * d, generator=g) * 3).to(dtype)
    q, k, v = (p.view(tokens, -1, d) for p in merged.split((hq * d, hkv * d, hkv * d), dim=-1))
    qw, kw = ((torch.rand(d, generator=g) + 0.5).to(dtype) for _ in range(2))
    cos, sin = rope.rope_cos_sin(torch.randint(0, 4000, (tokens,), generator=g), d, 1e6, dtype)
    caches = torch.zeros(2, -(-tokens // 16), 16, hkv, d, dtype=dtype)
    q_out, k_out = rope.qkv_norm_rope_store(q, k, v, qw, kw, cos, sin, EPS, caches[0], caches[1], torch.arange(tokens))
    assert torch.equal(q_out, rope.qk_norm_rope(q, qw, cos, sin, EPS))
    assert torch.equal(k_out, rope.qk_norm_rope(k, kw, cos, sin, EPS))
    assert q_out.is_contiguous()  # as one call's output: the attention's GEMMs read it in that layout
    assert torch.equal(caches[0].view(-1, hkv, d)[:tokens], k_out)
