"""Tests for engine.ops.rope: HF-exact cos/sin tables and neox-style rotation."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch

from engine import kernels
from engine.flags import REFERENCE
from engine.ops.rope import rope_cos_sin

# the table with every kernel off: its entry checks, then the pure-torch reference
apply_rope_neox = partial(kernels.apply_rope_neox, REFERENCE)


def reference_angles(positions: list[int], head_dim: int, theta: float) -> torch.Tensor:
    # float64 angle p * theta^(-2i/d) for i < d/2, python math only
    rows = [[p * theta ** (-2.0 * i / head_dim) for i in range(head_dim // 2)] for p in positions]
    return torch.tensor(rows, dtype=torch.float64)


@pytest.mark.parametrize("head_dim,theta", [(2, 10000.0), (38, 1e6), (128, 1e6)])
def test_cos_sin_match_float64(head_dim, theta, dtype, gen):
    positions = torch.randint(0, 4097, (19,), generator=gen)
    cos, sin = rope_cos_sin(positions, head_dim, theta, dtype)
    assert cos.shape == sin.shape == (19, head_dim) and cos.dtype == sin.dtype == dtype
    ang = reference_angles(positions.tolist(), head_dim, theta)
    # fp32 angles of large positions carry ~p * 2**-24 absolute error before the cosine
    atol = 4097 * 2**-23 + (0 if dtype == torch.float32 else 2**-8)
    for half in (cos[:, : head_dim // 2], cos[:, head_dim // 2 :]):
        torch.testing.assert_close(half.double(), ang.cos(), atol=atol, rtol=0)
    for half in (sin[:, : head_dim // 2], sin[:, head_dim // 2 :]):
        torch.testing.assert_close(half.double(), ang.sin(), atol=atol, rtol=0)


def test_cos_sin_equal_hugging_face_bitwise(dtype, gen):
    qwen3 = pytest.importorskip("transformers.models.qwen3.modeling_qwen3")
    config = qwen3.Qwen3Config(
        hidden_size=64, num_attention_heads=2, head_dim=38, rope_parameters={"rope_type": "default", "rope_theta": 1e6}
    )
    emb = qwen3.Qwen3RotaryEmbedding(config)
    positions = torch.randint(0, 40000, (83,), generator=gen)
    hf_cos, hf_sin = emb(torch.zeros(1, dtype=dtype), positions[None])
    cos, sin = rope_cos_sin(positions, 38, 1e6, dtype)
    assert torch.equal(cos, hf_cos[0]) and torch.equal(sin, hf_sin[0])


def test_apply_rope_is_a_complex_rotation(dtype, gen, close):
    tokens, heads, head_dim = 7, 3, 38
    positions = torch.randint(0, 500, (tokens,), generator=gen)
    cos, sin = rope_cos_sin(positions, head_dim, 10000.0, dtype)
    x = torch.randn(tokens, heads, head_dim, generator=gen).to(dtype)
    out = apply_rope_neox(x, cos, sin)
    assert out.shape == x.shape and out.dtype == dtype
    # pair (x_i, x_{i+d/2}) is the complex number x_i + j x_{i+d/2}, turned by the (rounded) angle
    half = head_dim // 2
    z = torch.complex(x[..., :half].double(), x[..., half:].double())
    rot = torch.complex(cos[:, None, :half].double(), sin[:, None, :half].double())
    expected = torch.cat(((z * rot).real, (z * rot).imag), dim=-1)
    close(out, expected, dtype)


def test_apply_rope_equals_hugging_face_bitwise(dtype, gen):
    qwen3 = pytest.importorskip("transformers.models.qwen3.modeling_qwen3")
    positions = torch.randint(0, 3000, (19,), generator=gen)
    cos, sin = rope_cos_sin(positions, 64, 1e6, dtype)
    q = torch.randn(19, 5, 64, generator=gen).to(dtype)
    k = torch.randn(19, 1, 64, generator=gen).to(dtype)
    hf_q, hf_k = qwen3.apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos[None], sin[None])
    assert torch.equal(apply_rope_neox(q, cos, sin), hf_q[0].transpose(0, 1))
    assert torch.equal(apply_rope_neox(k, cos, sin), hf_k[0].transpose(0, 1))


def test_rope_position_zero_is_identity(dtype, gen):
    cos, sin = rope_cos_sin(torch.zeros(3, dtype=torch.int64), 38, 1e6, dtype)
    x = torch.randn(3, 2, 38, generator=gen).to(dtype)
    assert torch.equal(apply_rope_neox(x, cos, sin), x)
    assert math.isclose(float(cos.min()), 1.0)


def test_rope_errors_name_the_tensor(gen):
    with pytest.raises(ValueError, match="head_dim: expected a positive even number, got 7"):
        rope_cos_sin(torch.arange(3), 7, 1e4, torch.float32)
    with pytest.raises(TypeError, match="positions: dtype float32"):
        rope_cos_sin(torch.zeros(3), 8, 1e4, torch.float32)
    cos, sin = rope_cos_sin(torch.arange(3), 8, 1e4, torch.float32)
    with pytest.raises(ValueError, match="cos: dim 0 is 3 but x's tokens is 4"):
        apply_rope_neox(torch.randn(4, 2, 8), cos, sin)
    with pytest.raises(TypeError, match="cos: dtype float32 differs from x's bfloat16"):
        apply_rope_neox(torch.randn(3, 2, 8).bfloat16(), cos, sin)


def test_apply_rope_accepts_a_slice_of_fused_qkv(dtype, gen):
    positions = torch.randint(0, 300, (7,), generator=gen)
    cos, sin = rope_cos_sin(positions, 38, 1e4, dtype)
    qkv = torch.randn(7, 3 * 5, 38, generator=gen).to(dtype)
    q = qkv[:, 5:10]  # heads 5..9 of the fused projection
    assert not q.is_contiguous()
    assert torch.equal(apply_rope_neox(q, cos, sin), apply_rope_neox(q.contiguous(), cos, sin))
