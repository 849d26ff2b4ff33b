"""Tests for engine.ops.act: SiLU-and-mul with HF's two roundings."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from engine import kernels
from engine.flags import REFERENCE

# the table with every kernel off: its entry checks, then the pure-torch reference
silu_and_mul = partial(kernels.silu_and_mul, REFERENCE)


@pytest.mark.parametrize("shape", [(1, 2 * 83), (7, 2 * 19), (3, 5, 2 * 111)])
def test_silu_and_mul_matches_float64(shape, dtype, gen, close):
    x = (3 * torch.randn(shape, generator=gen)).to(dtype)
    out = silu_and_mul(x)
    inter = shape[-1] // 2
    assert out.shape == (*shape[:-1], inter) and out.dtype == dtype
    gate, up = x[..., :inter].double(), x[..., inter:].double()
    close(out, gate / (1 + torch.exp(-gate)) * up, dtype)


def test_silu_and_mul_equals_hugging_face_mlp_bitwise(dtype, gen):
    qwen3 = pytest.importorskip("transformers.models.qwen3.modeling_qwen3")
    config = qwen3.Qwen3Config(hidden_size=19, intermediate_size=83, hidden_act="silu")
    mlp = qwen3.Qwen3MLP(config).to(dtype)
    x = torch.randn(7, 19, generator=gen).to(dtype)
    with torch.no_grad():
        gate_up = torch.cat((mlp.gate_proj(x), mlp.up_proj(x)), dim=-1)
        assert torch.equal(mlp.down_proj(silu_and_mul(gate_up)), mlp(x))


def test_silu_and_mul_rejects_odd_width():
    with pytest.raises(ValueError, match="x: last dim must be even"):
        silu_and_mul(torch.randn(3, 7))


def test_silu_and_mul_accepts_strided_inputs(dtype, gen, close):
    x = torch.randn(2 * 19, 7, generator=gen).to(dtype).T  # [7, 38], column-major
    gate, up = x[:, :19].double(), x[:, 19:].double()
    close(silu_and_mul(x), gate * torch.sigmoid(gate) * up, dtype)


def test_bf16_rounds_silu_before_the_multiply(gen):
    x = (3 * torch.randn(19, 2 * 83, generator=gen)).bfloat16()
    gate, up = x[:, :83], x[:, 83:]
    assert torch.equal(silu_and_mul(x), torch.nn.functional.silu(gate.contiguous()) * up)
    once = (torch.nn.functional.silu(gate.float()) * up.float()).bfloat16()
    assert not torch.equal(silu_and_mul(x), once)
