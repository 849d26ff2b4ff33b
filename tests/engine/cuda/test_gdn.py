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


# --- the chunked prefill kernel ---------------------------------------------------------------------------
def make_seq(batch, seq, k_heads, heads, dk, dv, dtype, device, seed):
    gen = torch.Generator(device=device).manual_seed(seed)
    q = torch.randn(batch, seq, k_heads, dk, generator=gen, device=device).to(dtype)
    k = (torch.randn(batch, seq, k_heads, dk, generator=gen, device=device) / dk**0.5).to(dtype)
    v = torch.randn(batch, seq, heads, dv, generator=gen, device=device).to(dtype)
    g = -torch.rand(batch, seq, heads, generator=gen, device=device) * 0.5
    beta = torch.rand(batch, seq, heads, generator=gen, device=device)
    state = torch.randn(batch, heads, dk, dv, generator=gen, device=device)
    return q, k, v, g, beta, state


CHUNKED_TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 1.6e-2)}


@gpu
@pytest.mark.parametrize(
    "batch,seq,k_heads,heads,dk,dv,chunk",
    [(1, 100, 16, 32, 128, 128, 64), (2, 65, 2, 4, 64, 128, 64), (3, 37, 1, 3, 19, 83, 7), (1, 130, 1, 1, 256, 33, 64)],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunked_matches_reference(cuda, batch, seq, k_heads, heads, dk, dv, chunk, dtype):
    from engine.cuda import gdn
    from engine.ops.gdn import gated_delta_chunked

    q, k, v, g, beta, state = make_seq(batch, seq, k_heads, heads, dk, dv, dtype, cuda, seq + dk)
    before = state.clone()
    opts = {"scale": dk**-0.5, "use_qk_l2norm": True}
    out, new = gdn.chunked(q, k, v, g, beta, state, chunk, **opts)
    ref_out, ref_new = gated_delta_chunked(q, k, v, g, beta, state, chunk, **opts)
    assert torch.equal(state, before) and out.dtype == dtype and new.dtype == torch.float32
    torch.testing.assert_close(new, ref_new, atol=1e-4, rtol=1e-4)
    atol, rtol = CHUNKED_TOL[dtype]
    torch.testing.assert_close(out.float(), ref_out.float(), atol=atol, rtol=rtol)


@gpu
def test_chunked_kernel_equals_its_decode_steps(cuda):
    """The chunked kernel and the decode kernel run the same recurrence: token by token they agree."""
    from engine.cuda import gdn

    q, k, v, g, beta, state = make_seq(2, 21, 2, 4, 32, 40, torch.float32, cuda, 5)
    out, new = gdn.chunked(q, k, v, g, beta, state, 8, use_qk_l2norm=True)
    s = state.clone()
    for t in range(21):
        o, s = gdn.decode(q[:, t], k[:, t], v[:, t], g[:, t], beta[:, t], s, use_qk_l2norm=True)
        torch.testing.assert_close(out[:, t], o, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(new, s, atol=1e-4, rtol=1e-4)


@gpu
def test_the_table_runs_the_chunked_kernel_under_its_flag(cuda):
    q, k, v, g, beta, state = make_seq(1, 9, 1, 2, 16, 12, torch.float32, cuda, 1)
    kernels.reset_counts()
    on = FlagSnapshot.defaults().with_(VT_GDN_CHUNKED_KERNEL=True)
    kernels.gated_delta_chunked(on, q, k, v, g, beta, state, 64)
    kernels.gated_delta_chunked(FlagSnapshot.defaults(), q, k, v, g, beta, state, 64)
    kernels.gated_delta_chunked(on, q, k, v, g, beta, state, 65)  # a chunk larger than the kernel's: declined
    ran = kernels.counts()
    assert ran.ran[("gated_delta_chunked", "cuda")] == 1 and ran.ran[("gated_delta_chunked", "reference")] == 2
    assert kernels.arms_ran("VT_GDN_CHUNKED_KERNEL", ran) == 1


def _swap(i: int, change):  # replace argument i of (q, k, v, g, beta, state) by change(it)
    return lambda args: (*args[:i], change(args[i]), *args[i + 1 :])


# (launcher, the bad argument, error type, message): both launchers share one checker; each message names the
# tensor and what it should have been (decode: batch 2, 1 key head, 2 heads, dk 8, dv 4; chunked: batch 1, T 3)
BAD_INPUTS = [
    ("decode", _swap(0, lambda t: t[None]), ValueError, "q: expected 3 dims, got shape (1, 2, 1, 8)"),
    ("chunked", _swap(0, lambda t: t[0]), ValueError, "q: expected 4 dims, got shape (3, 1, 8)"),
    ("decode", _swap(1, lambda t: t.double()), TypeError, "k: expected dtype torch.float32, got torch.float64"),
    ("decode", _swap(1, lambda t: t[:1]), ValueError, "k: shape (1, 1, 8) != q's (2, 1, 8)"),
    ("chunked", _swap(1, lambda t: t[:, :2]), ValueError, "k: shape (1, 2, 1, 8) != q's (1, 3, 1, 8)"),
    ("decode", _swap(2, lambda t: t[:1]), ValueError, "v: shape (1, 2, 4) does not lead with q's [batch] (2,)"),
    (
        "chunked",
        _swap(2, lambda t: t[:, :2]),
        ValueError,
        "v: shape (1, 2, 2, 4) does not lead with q's [batch, T] (1, 3)",
    ),
    (
        "decode",
        _swap(3, lambda t: t[:, :1]),
        ValueError,
        "g: shape (2, 1) on cpu is not [batch, heads] (2, 2) on cpu",
    ),
    (
        "chunked",
        _swap(4, lambda t: torch.empty(t.shape, device="meta")),
        ValueError,
        "beta: shape (1, 3, 2) on meta is not [batch, T, heads] (1, 3, 2) on cpu",
    ),
    ("chunked", _swap(5, lambda t: t.half()), TypeError, "state: expected dtype torch.float32, got torch.float16"),
    (
        "decode",
        _swap(5, lambda t: t.transpose(2, 3).contiguous()),
        ValueError,
        "state: shape (2, 2, 4, 8) != [batch, heads, dk, dv] (2, 2, 8, 4)",
    ),
    (
        "chunked",
        _swap(5, lambda t: t.transpose(2, 3).contiguous()),
        ValueError,
        "state: shape (1, 2, 4, 8) != [batch, heads, dk, dv] (1, 2, 8, 4)",
    ),
]


@pytest.mark.parametrize(("launcher", "change", "error", "message"), BAD_INPUTS)
def test_launchers_name_the_bad_input_before_any_launch(launcher, change, error, message):
    from engine.cuda import gdn

    cpu = torch.device("cpu")
    if launcher == "decode":
        args, call = make(2, 1, 2, 8, 4, torch.float32, cpu, 0), gdn.decode
    else:
        args, call = make_seq(1, 3, 1, 2, 8, 4, torch.float32, cpu, 0), lambda *a: gdn.chunked(*a, 4)
    with pytest.raises(error) as err:
        call(*change(args))
    assert str(err.value) == message


def test_chunked_limits_match_the_kernel_header():
    import re

    from engine.cuda import gdn

    header = (build.CUDA_DIR / "gdn.cuh").read_text()
    assert gdn.MAX_CHUNK == int(re.search(r"kMaxChunk = (\d+);", header).group(1))
    q = torch.zeros(1, 2, 1, 256)
    assert gdn.supports_chunked(q, q, q, 64) and not gdn.supports_chunked(q, q, q, 65)
    assert "vt_gdn_chunked" in gdn.SIGNATURES
