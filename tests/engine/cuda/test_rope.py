"""Tests for the RoPE kernels (engine/cuda/rope.cu) against engine.ops.rope and qk_norm on the GPU."""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import pytest
import torch

from engine import kernels
from engine.cuda import build
from engine.flags import FlagSnapshot
from engine.ops.norm import qk_norm
from engine.ops.rope import apply_rope_neox, rope_cos_sin

needs_nvcc = pytest.mark.skipif(
    shutil.which("nvcc") is None and not Path(build.NVCC).exists(),
    reason="nvcc not found: the CUDA sources cannot be compiled here",
)
gpu = pytest.mark.gpu
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# (tokens, heads, head_dim): odd token and head counts; head_dim 18 has an odd half
SHAPES = [(7, 3, 128), (1, 5, 18), (33, 2, 256), (4, 16, 64)]
EPS = 1e-6
THETA = 1_000_000.0

FAMILY = "rope"  # the conftest's `cuda` and `compiled` fixtures read these
KERNELS = "the RoPE kernels"


def inputs(shape: tuple[int, int, int], dtype: torch.dtype, device: torch.device, seed: int):
    tokens, heads, head_dim = shape
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=g) * 2).to(dtype).to(device)
    positions = torch.randint(0, 40_000, (tokens,), generator=g).to(device)
    cos, sin = rope_cos_sin(positions, head_dim, THETA, dtype)
    return x, cos, sin


@needs_nvcc
def test_launchers_reject_bad_arguments_before_any_launch(compiled):
    p, i, ll, f = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_float
    neox = compiled.vt_rope_neox
    neox.argtypes = [p, p, p, p, ll, i, i, ll, ll, i, p]
    compiled.vt_rope_last_error.restype = ctypes.c_char_p
    assert neox(None, None, None, None, 4, 2, 17, 34, 17, 1, None) == 1000
    assert compiled.vt_rope_last_error() == b"rope: head_dim must be positive and even (got 17)"
    assert neox(None, None, None, None, 4, 2, 16, 16, 16, 1, None) == 1000
    assert compiled.vt_rope_last_error() == b"rope: x token stride 16 < heads * head stride 32"
    fused = compiled.vt_rope_qk_norm_rope
    fused.argtypes = [p, p, p, p, p, ll, i, i, ll, ll, f, f, i, p]
    assert fused(None, None, None, None, None, 1, 1, 514, 514, 514, 1.0, EPS, 1, None) == 1001
    assert compiled.vt_rope_last_error() == b"rope: fused q/k norm supports head_dim <= 512 (got 514)"


def test_binding_rejects_a_cpu_tensor():
    from engine.cuda import rope

    x = torch.randn(3, 2, 8)
    with pytest.raises(ValueError, match="x: expected a CUDA tensor, got device cpu"):
        rope.apply_rope_neox(x, torch.randn(3, 8), torch.randn(3, 8))


@gpu
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_is_bitwise_the_reference(cuda, shape, dtype):
    from engine.cuda import rope

    x, cos, sin = inputs(shape, dtype, cuda, seed=sum(shape))
    got, want = rope.apply_rope_neox(x, cos, sin), apply_rope_neox(x, cos, sin)
    assert got.dtype == want.dtype and torch.equal(got, want)


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_reads_a_strided_slice_of_qkv(cuda, dtype):
    from engine.cuda import rope

    tokens, hq, hk, d = 9, 4, 2, 64
    qkv = torch.randn(tokens, hq + 2 * hk, d, dtype=dtype, device=cuda)
    q, k = qkv[:, :hq], qkv[:, hq : hq + hk]  # token stride (hq + 2 hk) * d, not hq * d
    _, cos, sin = inputs((tokens, hq, d), dtype, cuda, seed=3)
    for t in (q, k):
        assert torch.equal(rope.apply_rope_neox(t, cos, sin), apply_rope_neox(t, cos, sin))


@gpu
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_qk_norm_rope_matches_the_two_references(cuda, shape, dtype):
    from engine.cuda import rope

    x, cos, sin = inputs(shape, dtype, cuda, seed=11 + sum(shape))
    w = (torch.rand(shape[-1], device=cuda) + 0.5).to(dtype)
    got = rope.qk_norm_rope(x, w, cos, sin, EPS)
    want = apply_rope_neox(qk_norm(x, w, EPS), cos, sin)
    # only the fp32 sum-of-squares order differs: a normed value moves by at most one ulp (a few in fp32),
    # and RoPE combines two of them, so allow two ulps of the row's scale
    tol = 2e-5 if dtype == torch.float32 else 2 * torch.finfo(dtype).eps
    torch.testing.assert_close(got, want, rtol=tol, atol=tol * want.abs().max().item())
    if dtype != torch.float32:
        assert (got == want).float().mean().item() >= 0.99


@gpu
def test_the_table_runs_the_kernels_only_under_their_flags(cuda):
    from engine.cuda import rope

    x = torch.randn(5, 3, 64, device=cuda, dtype=torch.bfloat16)
    w = torch.randn(64, device=cuda, dtype=torch.bfloat16)
    cos, sin = rope_cos_sin(torch.arange(5, device=cuda), 64, 10000.0, torch.bfloat16)
    base = FlagSnapshot.defaults()
    kernels.reset_counts()
    assert torch.equal(kernels.apply_rope_neox(base, x, cos, sin), apply_rope_neox(x, cos, sin))  # bitwise
    rollback = base.with_(VT_NORM_KERNEL=False, VT_QK_NORM_ROPE_FUSED=False)
    kernels.qk_norm_rope(rollback, x, w, cos, sin, EPS)  # qk_norm in torch, then the RoPE kernel
    assert torch.equal(kernels.qk_norm_rope(base, x, w, cos, sin, EPS), rope.qk_norm_rope(x, w, cos, sin, EPS))
    assert kernels.counts().ran == {
        ("apply_rope_neox", "cuda"): 2,
        ("qk_norm_rope", "norm_then_rope"): 1,
        ("qk_norm", "reference"): 1,
        ("qk_norm_rope", "fused"): 1,
    }


def test_binding_argtypes_match_the_launchers():
    from engine.cuda import rope
    from tests.engine.cuda.signatures import exported

    launchers = exported(build.CUDA_DIR / "rope.cu")
    assert set(rope.SIGNATURES) == set(launchers) - {"vt_rope_last_error"}
    for name, argtypes in rope.SIGNATURES.items():
        assert argtypes == launchers[name], name
