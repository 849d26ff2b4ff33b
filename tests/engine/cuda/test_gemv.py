"""Tests for the decode GEMV (engine/cuda/gemv.cu) against engine.ops.gemv on the GPU, and the launcher's checks."""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import pytest
import torch

from engine import kernels
from engine.cuda import build
from engine.flags import REFERENCE, FlagSnapshot
from engine.ops.gemv import linear

needs_nvcc = pytest.mark.skipif(
    shutil.which("nvcc") is None and not Path(build.NVCC).exists(),
    reason="nvcc not found: the CUDA sources cannot be compiled here",
)
gpu = pytest.mark.gpu
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# (rows of x, out_features, in_features). 16-byte path: K 1024, 4104 (a last chunk of one lane), 264, 2056;
# N 9001 is past the split-K threshold (one warp per row), the small N split K; 8 rows of K 4096 (64 KB of
# bf16/fp16 x) read x through L1, not shared memory; m 3 and 5 pad the rows of x to 4 and 8.
# Scalar path: K 1001, 111 and 4101 (not a multiple of 8 or 4), fp32 K 4102.
SHAPES = [
    (1, 769, 1024),
    (1, 83, 1001),
    (3, 19, 4096),
    (8, 7, 111),
    (1, 1, 8),
    (1, 4099, 4104),
    (2, 9001, 264),
    (5, 37, 2056),
    (8, 300, 4096),
    (1, 131, 4101),
    (2, 65, 4102),
]


def tolerance(dtype: torch.dtype, x: torch.Tensor, w: torch.Tensor, bias: bool = False) -> dict[str, float]:
    """fp32 accumulation in another order than cuBLAS: one output ulp, plus fp32 noise on the sum of |terms|.
    With a bias, cuBLAS may round the product to the dtype before adding it (a second rounding the kernel
    does not make): half an ulp of the largest product more."""
    eps = torch.finfo(dtype).eps
    scale = (x.float().abs() @ w.float().abs().T).max().item()
    product = (x.double() @ w.double().T).abs().max().item() if bias else 0.0
    return {"rtol": eps, "atol": 1e-5 * scale + eps * scale / 64 + eps * product / 2}


FAMILY = "gemv"  # the conftest's `cuda` and `compiled` fixtures read these
KERNELS = "the GEMV kernels"


@needs_nvcc
def test_launcher_rejects_bad_arguments_before_any_launch(compiled):
    p, i, ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
    fn = compiled.vt_gemv_gemv
    fn.argtypes = [p, p, p, p, i, i, i, ll, ll, ll, i, i, p]
    compiled.vt_gemv_last_error.restype = ctypes.c_char_p
    assert fn(None, None, None, None, 1, 16, 32, 31, 32, 16, 1, 1, None) == 1000
    assert compiled.vt_gemv_last_error() == b"gemv: weight row stride 31 < in features 32"
    assert fn(None, None, None, None, 1, 16, 32, 32, 32, 16, 1, 5, None) == 1001
    assert compiled.vt_gemv_last_error() == b"gemv: out dtype code 5 is not 0 (fp32), 1 (bf16) or 2 (fp16)"
    assert fn(None, None, None, None, 70_000, 16, 32, 32, 32, 16, 1, 1, None) == 1000
    assert compiled.vt_gemv_last_error() == b"gemv: rows of x 70000 outside [0, 65535]"


def test_binding_rejects_a_cpu_tensor():
    from engine.cuda import gemv

    with pytest.raises(ValueError, match="x: expected a CUDA tensor, got device cpu"):
        gemv.linear(torch.randn(1, 8), torch.randn(4, 8))


@gpu
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_gemv_matches_linear_in_the_callers_dtype(cuda, shape, dtype, with_bias):
    from engine.cuda import gemv

    m, n, k = shape
    g = torch.Generator().manual_seed(m * n + k)
    x = torch.randn(m, k, generator=g).to(dtype).to(cuda)
    w = (torch.randn(n, k, generator=g) / k**0.5).to(dtype).to(cuda)
    b = torch.randn(n, generator=g).to(dtype).to(cuda) if with_bias else None
    got, want = gemv.linear(x, w, b), linear(x, w, b)
    assert got.dtype == dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, **tolerance(dtype, x, w, with_bias))


@gpu
def test_gemv_output_dtype_follows_the_caller(cuda):
    from engine.cuda import gemv

    x = torch.randn(1, 512, device=cuda, dtype=torch.bfloat16)
    w = torch.randn(33, 512, device=cuda, dtype=torch.bfloat16) / 512**0.5
    wide = gemv.linear(x, w, out_dtype=torch.float32)  # the caller asks for fp32: one rounding, to fp32
    assert wide.dtype == torch.float32
    torch.testing.assert_close(wide, x.double() @ w.double().T, rtol=1e-5, atol=1e-5, check_dtype=False)
    assert torch.equal(gemv.linear(x, w), wide.to(torch.bfloat16))  # narrowing the fp32 result is the bf16 one


@gpu
def test_gemv_reads_strided_rows_and_a_1d_x(cuda):
    from engine.cuda import gemv

    w_wide = torch.randn(21, 300, device=cuda, dtype=torch.float16) / 16
    w = w_wide[:, :256]  # row stride 300, not 256: the scalar path
    x = torch.randn(256, device=cuda, dtype=torch.float16)
    got = gemv.linear(x, w)
    assert got.shape == (21,)
    torch.testing.assert_close(got, linear(x, w), **tolerance(torch.float16, x[None], w))


@gpu
def test_gemv_refuses_more_rows_than_max_rows(cuda):
    from engine.cuda import gemv

    x = torch.randn(gemv.MAX_ROWS + 1, 16, device=cuda)
    with pytest.raises(ValueError, match=f"x: {gemv.MAX_ROWS + 1} rows exceed the GEMV's MAX_ROWS={gemv.MAX_ROWS}"):
        gemv.linear(x, torch.randn(4, 16, device=cuda))


@gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_gemv_rounds_once_from_an_fp32_sum(cuda, dtype):
    """Against the float64 product: within half an output ulp plus the worst-case fp32 summation error, element by
    element (a half-precision accumulator or partial sums rounded to the output dtype break this bound)."""
    from engine.cuda import gemv

    g = torch.Generator().manual_seed(5)
    m, n, k = 4, 769, 1024
    x = torch.randn(m, k, generator=g).to(dtype).to(cuda)
    w = (torch.randn(n, k, generator=g) / k**0.5).to(dtype).to(cuda)
    b = torch.randn(n, generator=g).to(dtype).to(cuda)
    exact = x.double() @ w.double().T + b.double()
    terms = x.double().abs() @ w.double().abs().T + b.double().abs()
    half_ulp = torch.finfo(dtype).eps / 2 * exact.abs()
    bound = half_ulp + (k + 1) * 2.0**-24 * terms
    err = (gemv.linear(x, w, b).double() - exact).abs()
    assert bool((err <= bound).all()), f"worst excess {(err - bound).max().item():.3e}"


@gpu
def test_the_table_sends_decode_rows_to_the_gemv_under_both_flags(cuda):
    from engine.cuda import gemv

    x = torch.randn(2, 256, device=cuda, dtype=torch.bfloat16)
    w = torch.randn(192, 256, device=cuda, dtype=torch.bfloat16)
    on = FlagSnapshot.defaults().with_(VT_GEMV=True, VT_GEMV_STREAM=False, VT_GEMV_PDL=False)  # the plain GEMV arm
    kernels.reset_counts()
    assert torch.equal(kernels.linear(on, x, w), gemv.linear(x, w))
    kernels.linear(on, torch.randn(gemv.MAX_ROWS + 1, 256, device=cuda, dtype=torch.bfloat16), w)  # a prefill
    past = kernels.gemv.GEMV_TAKES_ROWS + 1  # the kernel takes it; the table leaves it to cuBLAS (its A/B)
    kernels.linear(on, torch.randn(past, 256, device=cuda, dtype=torch.bfloat16), w)
    kernels.linear(on.with_(VT_GEMV=False), x, w)
    kernels.linear(REFERENCE, x, w)
    seen = kernels.counts()
    assert seen.ran == {("linear", "gemv"): 1, ("linear", "reference"): 4}
    assert seen.fallbacks == {
        ("linear", "gemv", "at most 8 rows and a row-major weight, on x's device"): 1,
        ("linear", "gemv", "1-2 rows unasked (its A/B's range)"): 1,
    }


@gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("k", [4104, 1001])
def test_each_row_of_x_gets_the_same_bits_alone_or_with_others_and_on_every_run(cuda, dtype, k):
    """The sum order per output is fixed by (N, K) alone: padding the rows of x to 8, staging x in shared
    memory or reading it through L1 never changes a row's result, and a second run is bitwise the first."""
    from engine.cuda import gemv

    g = torch.Generator().manual_seed(k)
    x = torch.randn(5, k, generator=g).to(dtype).to(cuda)
    w = (torch.randn(4099, k, generator=g) / k**0.5).to(dtype).to(cuda)
    b = torch.randn(4099, generator=g).to(dtype).to(cuda)
    together = gemv.linear(x, w, b)
    assert torch.equal(together, gemv.linear(x, w, b))
    for r in range(5):
        assert torch.equal(gemv.linear(x[r : r + 1], w, b)[0], together[r]), f"row {r}"


def test_max_rows_agrees_with_the_kernel_constant():
    from engine.cuda import gemv

    text = (build.CUDA_DIR / "gemv.cuh").read_text()
    assert f"constexpr int kMaxRows = {gemv.MAX_ROWS};" in text


def test_binding_argtypes_match_the_launchers():
    from engine.cuda import gemv
    from tests.engine.cuda.signatures import exported

    launchers = exported(build.CUDA_DIR / "gemv.cu")
    assert set(gemv.SIGNATURES) == set(launchers) - {"vt_gemv_last_error"}
    for name, argtypes in gemv.SIGNATURES.items():
        assert argtypes == launchers[name], name
