"""Tests for engine.ops.gdn: the gated delta rule, decode step and chunked prefill, against a float64 loop."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch

from engine import kernels
from engine.flags import REFERENCE
from engine.ops.gdn import gated_delta_chunked

# the table with every kernel off: its entry checks, then the pure-torch reference
gated_delta_decode = partial(kernels.gated_delta_decode, REFERENCE)


def loop_recurrence(q, k, v, g, beta, state, scale=1.0, l2norm=False):
    """float64 python loop over tokens, batch and value heads: S = a (I - b k k^T) S + b k v^T, o = S^T q."""
    batch, seq, heads, dv = v.shape
    group = heads // q.shape[2]
    s = state.double().clone()
    out = torch.empty(batch, seq, heads, dv, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            for t in range(seq):
                qt, kt = q[b, t, h // group].double(), k[b, t, h // group].double()
                if l2norm:
                    qt, kt = qt / math.sqrt(float(qt @ qt) + 1e-6), kt / math.sqrt(float(kt @ kt) + 1e-6)
                a, bt = math.exp(float(g[b, t, h])), float(beta[b, t, h])
                eye = torch.eye(kt.shape[0], dtype=torch.float64)
                s[b, h] = a * (eye - bt * torch.outer(kt, kt)) @ s[b, h] + bt * torch.outer(kt, v[b, t, h].double())
                out[b, t, h] = s[b, h].T @ (qt * scale)
    return out, s


def inputs(gen, dtype, batch=2, seq=19, k_heads=3, heads=3, dk=7, dv=11):
    q = torch.randn(batch, seq, k_heads, dk, generator=gen).to(dtype)
    k = (torch.randn(batch, seq, k_heads, dk, generator=gen) / math.sqrt(dk)).to(dtype)  # |k| ~ 1: a stable rule
    v = torch.randn(batch, seq, heads, dv, generator=gen).to(dtype)
    g = torch.nn.functional.logsigmoid(2 + torch.randn(batch, seq, heads, generator=gen)).to(dtype)
    beta = torch.sigmoid(torch.randn(batch, seq, heads, generator=gen)).to(dtype)
    state = torch.randn(batch, heads, dk, dv, generator=gen)
    return q, k, v, g, beta, state


def decode_steps(q, k, v, g, beta, state, **opts):
    outs, s = [], state
    for t in range(q.shape[1]):
        o, s = gated_delta_decode(q[:, t], k[:, t], v[:, t], g[:, t], beta[:, t], s, **opts)
        outs.append(o)
    return torch.stack(outs, dim=1), s


def test_decode_steps_match_float64_loop(dtype, gen, close):
    q, k, v, g, beta, state = inputs(gen, dtype)
    before = state.clone()
    out, s = decode_steps(q, k, v, g, beta, state)
    assert torch.equal(state, before), "the input state must not be modified"
    assert out.dtype == dtype and out.shape == v.shape and s.dtype == torch.float32
    ref_out, ref_s = loop_recurrence(q, k, v, g, beta, state)
    close(out, ref_out, dtype, "reduction")
    close(s, ref_s, torch.float32, "reduction")


@pytest.mark.parametrize("chunk_size", [1, 4, 7, 19, 64])
def test_chunked_equals_decode_steps_and_the_loop(chunk_size, dtype, gen, close):
    q, k, v, g, beta, state = inputs(gen, dtype)
    out, s = gated_delta_chunked(q, k, v, g, beta, state, chunk_size)
    assert out.dtype == dtype and out.shape == v.shape and s.shape == state.shape
    step_out, step_s = decode_steps(q, k, v, g, beta, state)
    close(out, step_out, dtype, "reduction")
    close(s, step_s, torch.float32, "reduction")
    ref_out, ref_s = loop_recurrence(q, k, v, g, beta, state)
    close(out, ref_out, dtype, "reduction")
    close(s, ref_s, torch.float32, "reduction")


@pytest.mark.parametrize("chunk_size", [5, 16])
def test_grouped_heads_l2norm_and_scale(chunk_size, gen, close):
    q, k, v, g, beta, state = inputs(gen, torch.float32, k_heads=2, heads=6, dk=19)
    opts = dict(scale=19**-0.5, use_qk_l2norm=True)
    out, s = gated_delta_chunked(q, k * 5, v, g, beta, state, chunk_size, **opts)
    ref_out, ref_s = loop_recurrence(q, k * 5, v, g, beta, state, scale=19**-0.5, l2norm=True)
    close(out, ref_out, torch.float32, "reduction")
    close(s, ref_s, torch.float32, "reduction")
    step_out, _ = decode_steps(q, k * 5, v, g, beta, state, **opts)
    close(step_out, ref_out, torch.float32, "reduction")


@pytest.mark.slow  # importing the Qwen3-Next module takes seconds
def test_chunked_matches_hugging_face_qwen3_next(gen, close):
    nxt = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
    q, k, v, g, beta, state = inputs(gen, torch.float32, k_heads=2, heads=4, dk=16, dv=8, seq=37)
    out, s = gated_delta_chunked(q, k, v, g, beta, state, 16, scale=16**-0.5, use_qk_l2norm=True)
    hf_out, hf_s = nxt.torch_chunk_gated_delta_rule(
        q, k, v, g, beta, chunk_size=16, initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True
    )
    close(out, hf_out, torch.float32, "reduction")
    close(s, hf_s, torch.float32, "reduction")


def test_gdn_errors_name_the_tensor(gen):
    q, k, v, g, beta, state = inputs(gen, torch.float32)
    with pytest.raises(ValueError, match=r"state: shape \(2, 3, 7, 10\) != \[batch, heads, dk, dv\]"):
        gated_delta_chunked(q, k, v, g, beta, state[..., :10], 4)
    with pytest.raises(TypeError, match="state: dtype bfloat16"):
        gated_delta_chunked(q, k, v, g, beta, state.bfloat16(), 4)
    with pytest.raises(ValueError, match="beta: shape"):
        gated_delta_decode(q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, :2, 0], state)
    with pytest.raises(ValueError, match="chunk_size: expected >= 1, got 0"):
        gated_delta_chunked(q, k, v, g, beta, state, 0)
    with pytest.raises(ValueError, match="v: 3 value heads is not a multiple of q's 2 key heads"):
        gated_delta_decode(q[:, 0, :2], k[:, 0, :2], v[:, 0], g[:, 0], beta[:, 0], state)
