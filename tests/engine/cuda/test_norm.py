"""Tests for the norm kernels (engine/cuda/norm.cu) against engine.ops.norm on the GPU, and the launcher's checks."""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import pytest
import torch

from engine import kernels
from engine.cuda import build
from engine.flags import REFERENCE, FlagSnapshot
from engine.ops.norm import fused_add_rms_norm, rms_norm

needs_nvcc = pytest.mark.skipif(
    shutil.which("nvcc") is None and not Path(build.NVCC).exists(),
    reason="nvcc not found: the CUDA sources cannot be compiled here",
)
gpu = pytest.mark.gpu
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
SHAPES = [(7, 769), (3, 5, 111), (2, 4096), (1, 19)]
EPS = 1e-6


def ulps(dtype: torch.dtype) -> dict[str, float]:
    """What a different fp32 sum-of-squares order may do: move a half-precision value by one unit in the last
    place, and an fp32 value by the few ulps the scale itself moves."""
    eps = 1e-5 if dtype == torch.float32 else torch.finfo(dtype).eps
    return {"rtol": eps, "atol": eps}


def mostly_bitwise(got: torch.Tensor, want: torch.Tensor) -> None:
    """In half precision a one-ulp fp32 change of the scale rarely moves the rounded value."""
    if got.dtype != torch.float32:
        assert (got == want).float().mean().item() >= 0.999


FAMILY = "norm"  # the conftest's `cuda` and `compiled` fixtures read these
KERNELS = "the norm kernels"


def last_error(lib: ctypes.CDLL) -> str:
    lib.vt_norm_last_error.restype = ctypes.c_char_p
    return lib.vt_norm_last_error().decode()


@needs_nvcc
def test_launcher_rejects_bad_arguments_before_any_launch(compiled):
    p, i, ll, f = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_float
    rms = compiled.vt_norm_rms_norm
    rms.argtypes = [p, p, p, i, i, ll, ll, f, f, i, p]
    assert rms(None, None, None, 3, 0, 0, 0, 1.0, EPS, 1, None) == 1000
    assert last_error(compiled) == "norm: hidden must be > 0 (got 0)"
    assert rms(None, None, None, 3, 16, 8, 16, 1.0, EPS, 1, None) == 1000
    assert last_error(compiled) == "norm: x row stride 8 < hidden 16"
    assert rms(None, None, None, 3, 16, 16, 16, 1.0, EPS, 7, None) == 1001
    assert last_error(compiled) == "norm: dtype code 7 is not 0 (fp32), 1 (bf16) or 2 (fp16)"
    assert rms(None, None, None, 0, 16, 16, 16, 1.0, EPS, 1, None) == 0  # no rows: nothing to launch
    fused = compiled.vt_norm_fused_add_rms_norm
    fused.argtypes = [p, p, p, p, p, i, i, ll, ll, ll, ll, f, f, i, p]
    assert fused(None, None, None, None, None, 2, 16, 16, 16, 15, 16, 1.0, EPS, 1, None) == 1000
    assert last_error(compiled) == "norm: residual_in row stride 15 < hidden 16"


def test_mean_scale_is_torchs_float_factor():
    from engine.cuda.norm import mean_scale

    assert mean_scale(5, 4096) == 2.0**-12
    # rows * hidden above 2**24 is not exact in fp32, so the factor is not fl(1 / hidden)
    f32 = torch.float32
    want = (torch.tensor(4097.0, dtype=f32) / torch.tensor(4097.0 * 4097, dtype=f32)).item()
    assert mean_scale(4097, 4097) == want != torch.tensor(1 / 4097, dtype=f32).item()


def test_binding_rejects_a_cpu_tensor():
    from engine.cuda import norm

    with pytest.raises(ValueError, match="x: expected a CUDA tensor, got device cpu"):
        norm.rms_norm(torch.randn(3, 8), torch.randn(8), EPS)


@gpu
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_matches_reference(cuda, shape, dtype):
    from engine.cuda import norm

    g = torch.Generator().manual_seed(sum(shape))
    x = (torch.randn(shape, generator=g) * 3).to(dtype).to(cuda)
    w = (torch.rand(shape[-1], generator=g) + 0.5).to(dtype).to(cuda)
    got, want = norm.rms_norm(x, w, EPS), rms_norm(x, w, EPS)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, **ulps(dtype))
    mostly_bitwise(got, want)


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_reads_strided_rows(cuda, dtype):
    from engine.cuda import norm

    wide = torch.randn(9, 2 * 111, dtype=dtype, device=cuda)
    x = wide[:, 50:161]  # row stride 222, not 111
    w = torch.rand(111, dtype=dtype, device=cuda) + 0.5
    torch.testing.assert_close(norm.rms_norm(x, w, EPS), rms_norm(x, w, EPS), **ulps(dtype))


@gpu
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_add_rms_norm_matches_reference(cuda, shape, dtype):
    from engine.cuda import norm

    g = torch.Generator().manual_seed(7 + sum(shape))
    x, r = (torch.randn(shape, generator=g).to(dtype).to(cuda) for _ in range(2))
    w = (torch.rand(shape[-1], generator=g) + 0.5).to(dtype).to(cuda)
    r_before = r.clone()
    got, got_res = norm.fused_add_rms_norm(x, r, w, EPS)
    want, want_res = fused_add_rms_norm(x, r, w, EPS)
    assert torch.equal(got_res, want_res)  # the rounded sum is one add: exact
    assert torch.equal(r, r_before)  # not in place unless asked
    torch.testing.assert_close(got, want, **ulps(dtype))


@gpu
def test_fused_add_rms_norm_in_place_updates_the_residual(cuda):
    from engine.cuda import norm

    x = torch.randn(5, 83, dtype=torch.bfloat16, device=cuda)
    r = torch.randn(5, 83, dtype=torch.bfloat16, device=cuda)
    w = torch.rand(83, dtype=torch.bfloat16, device=cuda) + 0.5
    want, want_res = fused_add_rms_norm(x, r, w, EPS)
    got, got_res = norm.fused_add_rms_norm(x, r, w, EPS, inplace=True)
    assert got_res is r and torch.equal(r, want_res)
    torch.testing.assert_close(got, want, **ulps(torch.bfloat16))


@gpu
def test_weight_of_another_dtype_is_named(cuda):
    from engine.cuda import norm

    x = torch.randn(3, 16, dtype=torch.bfloat16, device=cuda)
    with pytest.raises(TypeError, match="weight: expected dtype torch.bfloat16, got torch.float32"):
        norm.rms_norm(x, torch.ones(16, device=cuda), EPS)


@gpu
def test_the_table_runs_the_kernels_only_under_both_flags(cuda):
    from engine.cuda import norm

    x = torch.randn(5, 9 * 37, device=cuda, dtype=torch.bfloat16)
    r, w = torch.randn_like(x), torch.randn(9 * 37, device=cuda, dtype=torch.bfloat16)
    on = FlagSnapshot.defaults().with_(VT_NORM_KERNEL=True)
    kernels.reset_counts()
    assert torch.equal(kernels.rms_norm(on, x, w, EPS), norm.rms_norm(x, w, EPS))
    got, got_res = kernels.fused_add_rms_norm(on, x, r, w, EPS)
    want, want_res = norm.fused_add_rms_norm(x, r, w, EPS)
    assert torch.equal(got, want) and torch.equal(got_res, want_res)
    kernels.qk_norm(on, x.view(5, 9, 37), w[:37], EPS)
    kernels.rms_norm(on.with_(VT_NORM_KERNEL=False), x, w, EPS)
    kernels.rms_norm(REFERENCE, x, w, EPS)
    assert kernels.counts().ran == {
        ("rms_norm", "cuda"): 1,
        ("fused_add_rms_norm", "cuda"): 1,
        ("qk_norm", "cuda"): 1,
        ("rms_norm", "reference"): 2,
    }


def test_binding_argtypes_match_the_launchers():
    from engine.cuda import norm
    from tests.engine.cuda.signatures import exported

    launchers = exported(build.CUDA_DIR / "norm.cu")
    assert set(norm.SIGNATURES) == set(launchers) - {"vt_norm_last_error"}
    for name, argtypes in norm.SIGNATURES.items():
        assert argtypes == launchers[name], name
