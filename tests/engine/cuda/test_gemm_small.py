"""The small decode GEMM (engine/cuda/gemm_small.cu): signatures and refusals on the CPU (real nvcc), and on a GPU
every row count 2..32 (one m16 tile to 16, two past) against an fp64 product, with poisoned outputs, odd column tails and a k past whole chunks; the
prologue bit for bit the norm kernel then the plain GEMM; the bits independent of the tile width."""

from __future__ import annotations

import ctypes

import pytest
import torch

from engine.cuda import build, gemm_small, norm
from tests.engine.cuda.signatures import exported

FAMILY = "gemm_small"  # the conftest's `cuda` and `compiled` fixtures read these
KERNELS = "the small decode GEMM kernels"
EPS = 1e-6
DTYPES = [torch.bfloat16, torch.float16]


def test_binding_argtypes_match_the_launchers():
    launchers = exported(build.CUDA_DIR / "gemm_small.cu")
    assert set(gemm_small.SIGNATURES) == set(launchers) - {"vt_gemm_small_last_error"}
    for name, argtypes in gemm_small.SIGNATURES.items():
        assert argtypes == launchers[name], name


def test_the_source_is_in_the_feature_table():
    assert build.load_table().sources["gemm_small.cu"] == "portable"


def test_the_staged_rows_fit_an_h200_up_to_k_3584_at_32_rows():
    optin = 227 * 1024  # what an H200 block may opt in to
    fits = [gemm_small.smem_bytes(32, k, 2) + gemm_small.STATIC_RESERVE <= optin for k in (1024, 3072, 3584, 3592)]
    assert fits == [True, True, True, False]  # Qwen3-0.6B's widest K (down: 3072) fits; a K 4096 model at b32 does not
    assert gemm_small.smem_bytes(9, 64, 2) == 8 * 32 * 8 * 4 * 4  # small rows: the partial sums set the size


def test_supports_refuses_a_cpu_weight_and_the_binding_names_the_tensor():
    w = torch.empty(64, 1024, dtype=torch.bfloat16)
    assert not gemm_small.supports(16, w, torch.empty(16, 1024, dtype=torch.bfloat16))
    with pytest.raises(ValueError) as err:
        gemm_small.linear(torch.randn(16, 64), torch.randn(8, 64))
    assert str(err.value) == "x: expected a CUDA tensor of at least 1 dim, got (16, 64) on cpu"


def test_launcher_refuses_what_it_cannot_take(compiled):
    fn = compiled.vt_gemm_small_gemm
    fn.argtypes = gemm_small.SIGNATURES["vt_gemm_small_gemm"]
    err = compiled.vt_gemm_small_last_error
    err.restype = ctypes.c_char_p
    aligned = ctypes.c_void_p(256)  # never dereferenced: every refusal comes before a launch
    cases = [
        (1, 1024, 1024, 1024, b"gemm_small: rows 1 outside [2, 32]"),
        (33, 1024, 1024, 1024, b"gemm_small: rows 33 outside [2, 32]"),
        (
            16,
            1024,
            1020,
            1020,
            b"gemm_small: k 1020 and the row strides must be multiples of 8, the bases 16-byte aligned",
        ),
        (16, 1024, 1024, 1000, b"gemm_small: a row stride is below its row length"),
    ]
    for m, n, k, ldw, message in cases:
        rc = fn(aligned, aligned, aligned, m, n, k, ldw, k, n, 1, None)
        assert rc != 0 and err() == message, (m, n, k)
    pro = compiled.vt_gemm_small_add_rms_norm
    pro.argtypes = gemm_small.SIGNATURES["vt_gemm_small_add_rms_norm"]
    rc = pro(
        aligned,
        aligned,
        aligned,
        aligned,
        None,
        None,
        aligned,
        16,
        64,
        64,
        64,
        64,
        64,
        64,
        64,
        1.0,
        EPS,
        1,
        1,
        0,
        0,
        None,
    )
    assert rc != 0 and err() == b"gemm_small: a bias, glu, pdl or another out dtype is not taken"
    # the prologue moves the residual's rows in 16-byte vectors: a base or a row stride off them is refused
    vectors = b"gemm_small: the residual's row strides must be multiples of 8, the bases 16-byte aligned"
    for residual, residual_out, ldr, ldro in (
        (ctypes.c_void_p(258), None, 64, 64),
        (aligned, None, 68, 64),
        (None, ctypes.c_void_p(264), 64, 64),
        (None, ctypes.c_void_p(1024), 64, 76),
    ):
        rc = pro(aligned, aligned, None, aligned, residual, residual_out, aligned, 16, 64, 64, 64, 64, ldr, ldro, 64,
                 1.0, EPS, 1, 1, 0, 0, None)  # fmt: skip
        assert rc != 0 and err() == vectors, (residual, residual_out, ldr, ldro)


def _inputs(g: torch.Generator, cuda: torch.device, m: int, n: int, k: int, dtype: torch.dtype):
    x = torch.randn(m, k, generator=g).to(dtype).to(cuda)
    w = (torch.randn(n, k, generator=g) / k**0.5).to(dtype).to(cuda)
    return x, w


def _run_poisoned(x: torch.Tensor, w: torch.Tensor, pad: int) -> torch.Tensor:
    """The plain launcher into a NaN-filled y whose rows are `pad` columns longer: every output written, nothing past."""
    m, k = x.shape
    n = w.shape[0]
    y = torch.full((m, n + pad), float("nan"), dtype=x.dtype, device=x.device)
    lib = gemm_small._lib()
    rc = lib.vt_gemm_small_gemm(
        y.data_ptr(), w.data_ptr(), x.data_ptr(), m, n, k, k, k, n + pad, 1 if x.dtype == torch.bfloat16 else 2, None
    )
    assert rc == 0, lib.vt_gemm_small_last_error()
    torch.cuda.synchronize()
    assert torch.isnan(y[:, n:]).all(), "a write past the last column"
    return y[:, :n]


def _assert_close_to_fp64(y: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> None:
    ref = x.double() @ w.double().T
    # one rounding of the output (2^-8 relative in bf16) over fp32 sums of unit-scale products
    bound = ref.abs() * 2.0**-8 + 2e-3
    bad = ((y.double() - ref).abs() > bound) | ~torch.isfinite(y)
    assert not bad.any(), f"{int(bad.sum())} of {bad.numel()} outputs off; first at {bad.nonzero()[0].tolist()}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_row_count_against_fp64(cuda, dtype):
    g = torch.Generator().manual_seed(1)
    for m in range(gemm_small.MIN_ROWS, gemm_small.MAX_ROWS + 1):
        x, w = _inputs(g, cuda, m, 83, 264, dtype)  # a 3-column tail of the last n8 tile; k 264 = 8 chunks + 8
        _assert_close_to_fp64(_run_poisoned(x, w, pad=5), x, w)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("m", "n", "k"),
    [
        (32, 4096, 1024),
        (9, 1024, 2048),
        (17, 6144, 1024),
        (32, 1024, 3072),
        (23, 769, 1000),
        (31, 16411, 136),
        (8, 4096, 1024),
        (8, 1024, 3072),
        (2, 6144, 1024),
        (16, 1024, 2048),
        (5, 769, 1000),
    ],
)
def test_model_and_odd_shapes_against_fp64(cuda, dtype, m, n, k):
    x, w = _inputs(torch.Generator().manual_seed(m * 7 + n), cuda, m, n, k, dtype)
    _assert_close_to_fp64(_run_poisoned(x, w, pad=3), x, w)


@pytest.mark.gpu
def test_the_bits_do_not_depend_on_the_tile_width(cuda):
    # on 132 SMs 16384 columns take 4 n8 tiles a block, 4096 take 2, 83 take 1: the first 83 columns must agree
    x, w = _inputs(torch.Generator().manual_seed(3), cuda, 20, 16384, 1024, torch.bfloat16)
    wide = gemm_small.linear(x, w)
    assert torch.equal(gemm_small.linear(x, w[:4096].contiguous())[:, :83], wide[:, :83])
    assert torch.equal(gemm_small.linear(x, w[:83].contiguous()), wide[:, :83])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_residual", [True, False])
def test_the_prologue_is_the_norm_kernel_then_the_gemm(cuda, dtype, with_residual):
    g = torch.Generator().manual_seed(5)
    for m in (2, 8, 9, 16, 17, 25, 32):
        x, w = _inputs(g, cuda, m, 1000, 1024, dtype)
        res = torch.randn(m, 1024, generator=g).to(dtype).to(cuda) if with_residual else None
        nw = (torch.rand(1024, generator=g) + 0.5).to(dtype).to(cuda)
        y, new_res = gemm_small.add_rms_norm_linear(x, res, nw, EPS, w)
        if res is None:
            normed, expect_res = norm.rms_norm(x, nw, EPS), x
        else:
            normed, expect_res = norm.fused_add_rms_norm(x, res, nw, EPS)
        assert torch.equal(new_res, expect_res)
        assert torch.equal(y, gemm_small.linear(normed, w))
        _assert_close_to_fp64(y, normed, w)


def test_the_table_holds_the_arms_behind_the_flag_off():
    from engine import flags, kernels
    from engine.kernels import gemv as family

    assert flags.FLAGS["VT_GEMM_SMALL"].default is False
    first = kernels.linear.arms[0]  # first, so within its range it comes before the GEMVs when on
    assert first.name == "gemm_small" and first.flags == ("VT_GEMM_SMALL",)
    # unasked, it takes the narrow projections at 3-8 rows (its wins); the prologue form, lost everywhere, by name
    wide, narrow = torch.ones(4096, 64), torch.ones(1024, 64)
    assert first.takes is not None and first.takes_note == "3-8 rows, at most 1024 outputs unasked (its A/B's range)"
    assert first.takes(torch.ones(8, 64), narrow) and first.takes(torch.ones(3, 64), narrow)
    assert not first.takes(torch.ones(8, 64), wide)
    assert not first.takes(torch.ones(2, 64), narrow) and not first.takes(torch.ones(9, 64), narrow)
    assert [a.name for a in kernels.add_rms_norm_linear.by_name] == ["prologue_gemm_small"]
    assert all(a.name != "prologue_gemm_small" for a in kernels.add_rms_norm_linear.arms)
    x, w = torch.ones(16, 64, dtype=torch.bfloat16), torch.ones(24, 64, dtype=torch.bfloat16)
    assert not family.supports_gemm_small(x, w)  # a CPU weight: the GEMM is a GPU kernel
    assert not family.supports_norm_gemm_small(x, None, torch.ones(64, dtype=torch.bfloat16), EPS, w)


def test_the_case_set_covers_both_forms_at_the_row_range_ends():
    from lab.gates.cases import gemm_small as cases

    names = {c.name for c in cases.CASES}
    assert len(names) == len(cases.CASES) == 2 * (13 + 6 * 2 * 2)
    assert {c.flag for c in cases.CASES if c.arm == "gemm_small"} == {"VT_GEMM_SMALL"}
    assert {c.flag for c in cases.CASES if c.arm == "prologue_gemm_small"} == {None}  # a by-name arm
    assert {c.arm for c in cases.CASES} == {"gemm_small", "prologue_gemm_small"}
    assert "gemm_small/plain/bf16/m32/n1024/k3072" in names and "gemm_small/plain/fp16/m9/n4096/k1024" in names
    assert "gemm_small/plain/bf16/m2/n6144/k1024" in names and "gemm_small/norm/fp16/m8/n4096/k1024" in names
    assert "gemm_small/norm/bf16/m32/n4096/k1024/first/exact" in names
    assert all(c.tolerance == "exact" for c in cases.CASES if c.name.endswith("/exact"))
    assert all(c.tolerance in ("bf16", "fp16") for c in cases.CASES if not c.name.endswith("/exact"))
