"""Tests for the gated delta net decode kernel (engine/cuda/gdn.cu) against engine.ops.gdn on the GPU."""

from __future__ import annotations

import pytest
import torch

from engine import kernels
from engine.cuda import build
from engine.flags import FlagSnapshot
from engine.ops.gdn import gated_delta_decode
from tests.engine.cuda.nvcc_strict import compile_strict, needs_nvcc

gpu = pytest.mark.gpu
# (atol, rtol) per q dtype: fp32 state, the two dot products summed in another order than torch's.
STATE_TOL = (2e-5, 2e-5)
OUT_TOL = {torch.float32: (5e-5, 5e-5), torch.bfloat16: (2e-2, 1.6e-2)}


@pytest.fixture
def cuda() -> torch.device:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the gated delta net kernel runs only on a GPU")
    return torch.device("cuda")


def make(batch, k_heads, heads, dk, dv, dtype, device, seed):
    gen = torch.Generator(device=device).manual_seed(seed)
    q = torch.randn(batch, k_heads, dk, generator=gen, device=device).to(dtype)
    k = (torch.randn(batch, k_heads, dk, generator=gen, device=device) / dk**0.5).to(dtype)
    v = torch.randn(batch, heads, dv, generator=gen, device=device).to(dtype)
    g = -torch.rand(batch, heads, generator=gen, device=device) * 2  # log decay <= 0
    beta = torch.rand(batch, heads, generator=gen, device=device)
    state = torch.randn(batch, heads, dk, dv, generator=gen, device=device)
    return q, k, v, g, beta, state


@needs_nvcc
def test_gdn_source_compiles_without_warnings(sm90_werror_dir):
    assert compile_strict("gdn.cu", sm90_werror_dir).stat().st_size > 0


@gpu
@pytest.mark.parametrize("batch,k_heads,heads,dk,dv", [(3, 2, 4, 128, 128), (1, 1, 1, 19, 83), (5, 4, 8, 256, 33)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("l2norm", [False, True])
def test_decode_matches_reference(cuda, batch, k_heads, heads, dk, dv, dtype, l2norm):
    from engine.cuda import gdn

    q, k, v, g, beta, state = make(batch, k_heads, heads, dk, dv, dtype, cuda, batch * dk + dv)
    before = state.clone()
    out, new = gdn.decode(q, k, v, g, beta, state, scale=dk**-0.5, use_qk_l2norm=l2norm)
    ref_out, ref_new = gated_delta_decode(q, k, v, g, beta, state, scale=dk**-0.5, use_qk_l2norm=l2norm)
    assert torch.equal(state, before), "decode without inplace must leave the state alone"
    assert out.dtype == dtype and new.dtype == torch.float32
    torch.testing.assert_close(new, ref_new, atol=STATE_TOL[0], rtol=STATE_TOL[1])
    atol, rtol = OUT_TOL[dtype]
    torch.testing.assert_close(out.float(), ref_out.float(), atol=atol, rtol=rtol)


@gpu
def test_decode_inplace_over_several_steps_tracks_the_reference(cuda):
    from engine.cuda import gdn

    q, k, v, g, beta, state = make(2, 2, 4, 64, 48, torch.float32, cuda, 11)
    ref = state.clone()
    for step in range(6):
        qs, ks, vs = q + 0.1 * step, k - 0.05 * step, v * (1 + 0.1 * step)
        out, s = gdn.decode(qs, ks, vs, g, beta, state, use_qk_l2norm=True, inplace=True)
        ref_out, ref = gated_delta_decode(qs, ks, vs, g, beta, ref, use_qk_l2norm=True)
        assert s.data_ptr() == state.data_ptr()
        torch.testing.assert_close(out, ref_out, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(state, ref, atol=1e-4, rtol=1e-4)


@gpu
def test_decode_comparison_catches_a_wrong_beta(cuda):
    """The comparison has teeth: one head's beta off by 1% moves only that head past the tolerance."""
    from engine.cuda import gdn

    q, k, v, g, beta, state = make(2, 2, 4, 32, 32, torch.float32, cuda, 3)
    bad = beta.clone()
    bad[1, 2] *= 1.01
    out, _ = gdn.decode(q, k, v, g, bad, state)
    ref_out, _ = gated_delta_decode(q, k, v, g, beta, state)
    moved = (out - ref_out).abs().amax(-1) > OUT_TOL[torch.float32][0] * 10
    assert moved[1, 2] and moved.sum() == 1


def test_binding_argtypes_match_the_launcher():
    from engine.cuda import gdn
    from tests.engine.cuda.signatures import exported

    assert gdn.SIGNATURES == {k: v for k, v in exported(build.CUDA_DIR / "gdn.cu").items() if k in gdn.SIGNATURES}
    assert "vt_gdn_decode" in gdn.SIGNATURES


def test_binding_limit_matches_the_kernel_header():
    import re

    from engine.cuda import gdn

    header = (build.CUDA_DIR / "gdn.cuh").read_text()
    assert gdn.MAX_HEAD_DIM_K == int(re.search(r"kMaxKDim = (\d+);", header).group(1))
    q = torch.zeros(1, 1, 256)
    assert gdn.supports(q, q, q) and not gdn.supports(q, q, q.double())
    assert not gdn.supports(torch.zeros(1, 1, 257), torch.zeros(1, 1, 257), q)


@gpu
def test_the_table_runs_the_kernel_under_the_flag(cuda):
    from engine.cuda import gdn

    q, k, v, g, beta, state = make(2, 2, 4, 32, 40, torch.bfloat16, cuda, 9)
    on = FlagSnapshot.defaults().with_(VT_GDN_KERNEL=True)
    kernels.reset_counts()
    out, new = kernels.gated_delta_decode(on, q, k, v, g, beta, state, use_qk_l2norm=True)
    kout, knew = gdn.decode(q, k, v, g, beta, state, use_qk_l2norm=True)
    assert torch.equal(out, kout) and torch.equal(new, knew)
    ref_out, ref_new = kernels.gated_delta_decode(
        on.with_(VT_GDN_KERNEL=False), q, k, v, g, beta, state, use_qk_l2norm=True
    )
    assert kernels.counts().ran == {("gated_delta_decode", "cuda"): 1, ("gated_delta_decode", "reference"): 1}
    torch.testing.assert_close(new, ref_new, atol=STATE_TOL[0], rtol=STATE_TOL[1])


def test_the_chunked_prefill_runs_its_reference_the_kernel_retired():
    """The chunked kernel lost its A/B (0.567x at 1024 tokens) and was retired: the op has no arm, the binding no
    launcher, the source no kernel."""
    from engine.cuda import gdn

    assert kernels.gated_delta_chunked.arms == () and kernels.gated_delta_chunked.by_name == ()
    assert set(gdn.SIGNATURES) == {"vt_gdn_decode"} and not hasattr(gdn, "chunked")
    assert "chunked" not in (build.CUDA_DIR / "gdn.cu").read_text()


def _swap(i: int, change):  # replace argument i of (q, k, v, g, beta, state) by change(it)
    return lambda args: (*args[:i], change(args[i]), *args[i + 1 :])


# (the bad argument, error type, message): each message names the tensor and what it should have been (batch 2,
# 1 key head, 2 heads, dk 8, dv 4)
BAD_INPUTS = [
    (_swap(0, lambda t: t[None]), ValueError, "q: expected 3 dims, got shape (1, 2, 1, 8)"),
    (_swap(1, lambda t: t.double()), TypeError, "k: expected dtype torch.float32, got torch.float64"),
    (_swap(1, lambda t: t[:1]), ValueError, "k: shape (1, 1, 8) != q's (2, 1, 8)"),
    (_swap(2, lambda t: t[:1]), ValueError, "v: shape (1, 2, 4) does not lead with q's [batch] (2,)"),
    (_swap(3, lambda t: t[:, :1]), ValueError, "g: shape (2, 1) on cpu is not [batch, heads] (2, 2) on cpu"),
    (
        _swap(4, lambda t: torch.empty(t.shape, device="meta")),
        ValueError,
        "beta: shape (2, 2) on meta is not [batch, heads] (2, 2) on cpu",
    ),
    (_swap(5, lambda t: t.half()), TypeError, "state: expected dtype torch.float32, got torch.float16"),
    (
        _swap(5, lambda t: t.transpose(2, 3).contiguous()),
        ValueError,
        "state: shape (2, 2, 4, 8) != [batch, heads, dk, dv] (2, 2, 8, 4)",
    ),
]


@pytest.mark.parametrize(("change", "error", "message"), BAD_INPUTS)
def test_the_launcher_names_the_bad_input_before_any_launch(change, error, message):
    from engine.cuda import gdn

    args = make(2, 1, 2, 8, 4, torch.float32, torch.device("cpu"), 0)
    with pytest.raises(error) as err:
        gdn.decode(*change(args))
    assert str(err.value) == message
