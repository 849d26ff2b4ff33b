"""Tests for engine.ops.norm: RMSNorm, fused add+RMSNorm, q/k norm."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from engine import kernels
from engine.flags import REFERENCE

# the table with every kernel off: its entry checks, then the pure-torch reference
fused_add_rms_norm = partial(kernels.fused_add_rms_norm, REFERENCE)
qk_norm = partial(kernels.qk_norm, REFERENCE)
rms_norm = partial(kernels.rms_norm, REFERENCE)


EPS = 1e-6


def reference_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    x64 = x.double()
    return w.double() * x64 / torch.sqrt((x64 * x64).mean(-1, keepdim=True) + eps)


@pytest.mark.parametrize("shape", [(1, 83), (7, 19), (3, 5, 111)])
def test_rms_norm_matches_float64(shape, dtype, gen, close):
    x = (3 * torch.randn(shape, generator=gen)).to(dtype)
    w = (1 + 0.5 * torch.randn(shape[-1], generator=gen)).to(dtype)
    out = rms_norm(x, w, EPS)
    assert out.dtype == dtype and out.shape == x.shape
    close(out, reference_rms_norm(x, w, EPS), dtype)


def test_rms_norm_rounds_before_the_weight_multiply(gen):
    x = torch.randn(19, 83, generator=gen).bfloat16()
    w = (1 + torch.randn(83, generator=gen)).bfloat16()
    xf = x.float()
    normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).bfloat16()
    assert torch.equal(rms_norm(x, w, EPS), w * normed)
    # rounding once, after the weight multiply, is a different contract and differs somewhere
    one_rounding = (w.float() * xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).bfloat16()
    assert not torch.equal(rms_norm(x, w, EPS), one_rounding)


def test_rms_norm_equals_hugging_face_bitwise(dtype, gen):
    qwen3 = pytest.importorskip("transformers.models.qwen3.modeling_qwen3")
    layer = qwen3.Qwen3RMSNorm(111, eps=EPS)
    with torch.no_grad():
        layer.weight.copy_(1 + torch.randn(111, generator=gen))
    layer = layer.to(dtype)
    x = torch.randn(7, 111, generator=gen).to(dtype)
    with torch.no_grad():
        assert torch.equal(rms_norm(x, layer.weight.detach(), EPS), layer(x))


def test_fused_add_rms_norm_rounds_the_sum_first(dtype, gen, close):
    x = torch.randn(7, 83, generator=gen).to(dtype)
    res = (4 * torch.randn(7, 83, generator=gen)).to(dtype)
    w = (1 + torch.randn(83, generator=gen)).to(dtype)
    normed, new_res = fused_add_rms_norm(x, res, w, EPS)
    assert new_res.dtype == dtype and normed.dtype == dtype
    assert torch.equal(new_res, (x.double() + res.double()).to(dtype))  # one rounding of the exact sum
    assert torch.equal(normed, rms_norm(new_res, w, EPS))
    close(normed, reference_rms_norm(new_res, w, EPS), dtype)


def test_qk_norm_normalises_each_head(dtype, gen, close):
    x = torch.randn(7, 5, 19, generator=gen).to(dtype)
    w = (1 + torch.randn(19, generator=gen)).to(dtype)
    out = qk_norm(x, w, EPS)
    for h in range(5):
        close(out[:, h], reference_rms_norm(x[:, h], w, EPS), dtype)


def test_norm_errors_name_the_tensor(gen):
    x = torch.randn(7, 19, generator=gen)
    with pytest.raises(ValueError, match="weight: dim 0 is 18 but x's last dim"):
        rms_norm(x, torch.randn(18), EPS)
    with pytest.raises(TypeError, match="weight: dtype bfloat16 differs"):
        rms_norm(x, torch.randn(19).bfloat16(), EPS)
    with pytest.raises(ValueError, match="residual: shape"):
        fused_add_rms_norm(x, torch.randn(7, 18), torch.randn(19), EPS)
    with pytest.raises(ValueError, match="x: expected 3 dims"):
        qk_norm(x, torch.randn(19), EPS)


def test_norms_accept_strided_inputs(dtype, gen, close):
    fused = torch.randn(7, 3 * 83, generator=gen).to(dtype)
    x = fused[:, 83 : 2 * 83]  # a column slice: row stride 249
    w = (1 + torch.randn(83, generator=gen)).to(dtype)
    close(rms_norm(x, w, EPS), reference_rms_norm(x, w, EPS), dtype)
    heads = torch.randn(5, 7, 19, generator=gen).to(dtype).transpose(0, 1)  # [tokens, heads, D], not contiguous
    wh = (1 + torch.randn(19, generator=gen)).to(dtype)
    close(qk_norm(heads, wh, EPS), reference_rms_norm(heads, wh, EPS), dtype)


def test_fused_add_normalises_the_rounded_sum(gen):
    x = torch.randn(19, 83, generator=gen).bfloat16()
    res = (8 * torch.randn(19, 83, generator=gen)).bfloat16()
    w = (1 + torch.randn(83, generator=gen)).bfloat16()
    normed, _ = fused_add_rms_norm(x, res, w, EPS)
    exact_sum = x.float() + res.float()
    unrounded = w * (exact_sum * torch.rsqrt(exact_sum.pow(2).mean(-1, keepdim=True) + EPS)).bfloat16()
    assert not torch.equal(normed, unrounded)
