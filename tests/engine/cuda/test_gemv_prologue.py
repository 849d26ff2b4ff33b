"""The prologue GEMVs and the PDL GEMV (engine/cuda/gemv_prologue.cu, gemv.cu): signatures, the bindings' checks on the
CPU, the launcher's refusals (real nvcc), and on a GPU the fused ops bit for bit against the kernels they replace,
eager and replayed from a captured CUDA graph."""

from __future__ import annotations

import ctypes
from collections import Counter

import pytest
import torch

from engine.cuda import act, build, gemv, norm
from tests.engine.cuda.gemv_chain import assert_chain_equals_defaults, rand
from tests.engine.cuda.signatures import exported

FAMILY = "gemv_prologue"  # the conftest's `cuda` and `compiled` fixtures read these
KERNELS = "the prologue GEMV kernels"
EPS = 1e-6


def test_binding_argtypes_match_the_launchers():
    for source, table in (("gemv_prologue.cu", gemv.PROLOGUE_SIGNATURES), ("gemv.cu", gemv.SIGNATURES)):
        launchers = exported(build.CUDA_DIR / source)
        assert set(table) == set(launchers) - {f"vt_{source.removesuffix('.cu')}_last_error"}, source
        for name, argtypes in table.items():
            assert argtypes == launchers[name], name


def test_the_source_is_in_the_feature_table():
    assert build.load_table().sources["gemv_prologue.cu"] == "portable"


def _norm_args(m: int = 1, k: int = 64, n: int = 16) -> tuple:
    return (torch.randn(m, k), torch.randn(m, k), torch.ones(k), EPS, torch.randn(n, k))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda a: (a[0], torch.randn(2, 64), *a[2:]), "residual: shape (2, 64) != x's (1, 64)"),
        (lambda a: (a[0], a[1], torch.ones(63), *a[3:]), "norm_weight: shape (63,) != (hidden,) = (64,)"),
        (lambda a: a, "x: expected a CUDA tensor, got device cpu"),
    ],
)
def test_norm_binding_names_the_bad_tensor_before_any_launch(change, message):
    with pytest.raises(ValueError) as err:
        gemv.add_rms_norm_linear(*change(_norm_args()))
    assert str(err.value) == message


def test_the_retired_gemv_forms_are_gone_from_the_binding_and_the_sources():
    """The persistent GEMV and the SiLU-and-mul prologue lost their A/Bs at every measured shape (docs/BENCHMARKS.md):
    no launcher, no binding, no kernel left."""
    assert not hasattr(gemv, "silu_mul_linear") and not hasattr(gemv, "supports_persistent")
    assert set(gemv.PROLOGUE_SIGNATURES) == {"vt_gemv_prologue_add_rms_norm"}
    for source in ("gemv.cu", "gemv.cuh", "gemv_prologue.cu", "gemv_prologue.cuh"):
        text = (build.CUDA_DIR / source).read_text()
        assert "persistent" not in text.lower(), source
        assert "prologue" not in source or ("SiluMul" not in text and "silu_mul(" not in text), source


@pytest.mark.parametrize(
    ("rows", "k", "fits"),
    [(1, 1024, True), (8, 2048, True), (9, 64, False), (8, 3072, False), (1, 1020, False), (7, 3072, True)],
)
def test_supports_prologue_rows_in_shared_memory_and_whole_vectors(rows, k, fits):
    w = torch.empty(16, k, dtype=torch.bfloat16)
    x = torch.empty(rows, k, dtype=torch.bfloat16)
    assert gemv.supports_prologue(rows, k, w, x) is fits


def test_supports_prologue_refuses_a_transposed_weight_and_odd_strides():
    w = torch.empty(1024, 16, dtype=torch.bfloat16).T  # [16, 1024], column-major
    x = torch.empty(2, 1024, dtype=torch.bfloat16)
    assert not gemv.supports_prologue(2, 1024, w, x)
    x_odd = torch.empty(2, 1027, dtype=torch.bfloat16)[:, :1024]  # row stride 1027: not whole 16-byte rows
    assert not gemv.supports_prologue(2, 1024, w.T.contiguous().T.contiguous(), x_odd)


@pytest.mark.parametrize(
    ("m", "n", "k", "alias", "out_dtype", "message"),
    [
        (9, 1024, 1024, False, 1, b"gemv prologue: rows 9 outside [1, 8]"),
        (
            1,
            1024,
            1020,
            False,
            1,
            b"gemv prologue: k 1020 and the row strides must be multiples of 8, the bases 16-byte aligned",
        ),
        (8, 1024, 3072, False, 1, b"gemv prologue: 8 rows of 3072 in features exceed 47104 bytes of shared memory"),
        (1, 64, 64, True, 1, b"gemv prologue: residual_out must not alias x or residual (blocks read them)"),
        (1, 64, 64, False, 0, b"gemv prologue: out dtype code 0 differs from the dtype code 1"),
    ],
)
def test_launcher_refuses_what_the_fast_path_cannot_take(compiled, m, n, k, alias, out_dtype, message):
    p, f = ctypes.c_void_p, ctypes.c_float
    fn = compiled.vt_gemv_prologue_add_rms_norm
    fn.argtypes = gemv.PROLOGUE_SIGNATURES["vt_gemv_prologue_add_rms_norm"]
    err = compiled.vt_gemv_prologue_last_error
    err.restype = ctypes.c_char_p
    aligned = p(256)  # never dereferenced: every refusal comes before a launch
    residual = aligned if alias else None  # with alias: residual and residual_out at x's address
    pointers = (aligned, aligned, None, aligned, residual, residual, aligned)  # y, w, bias, x, residual, _out, norm_w
    # m, n, k, ldw, ldx, ldr, ldro, ldy, mean_scale, eps, dtype (bf16), out_dtype, glu, pdl, stream
    rc = fn(*pointers, m, n, k, k, k, k, k, n, f(1.0), f(EPS), 1, out_dtype, 0, 0, None)
    assert rc != 0 and err() == message, (m, n, k)


@pytest.mark.gpu
@pytest.mark.parametrize("pdl", [False, True])
def test_fused_ops_equal_the_kernels_they_replace_eager_and_in_a_graph(cuda, pdl):
    g = torch.Generator().manual_seed(0)
    x, res = rand(g, cuda, 1, 1024), rand(g, cuda, 1, 1024)
    nw = (torch.rand(1024, generator=g) + 0.5).to(torch.bfloat16).to(cuda)
    w_up, w_down = rand(g, cuda, 6144, 1024, scale=1 / 32), rand(g, cuda, 1024, 3072, scale=1 / 55)
    w_o = rand(g, cuda, 1024, 1024, scale=1 / 32)

    def fused():  # gate/up with its pre-norm, the activation, then plain GEMVs: PDL grids
        gate_up, new_res = gemv.add_rms_norm_linear(x, res, nw, EPS, w_up, pdl=pdl)
        down = gemv.linear(act.silu_and_mul(gate_up), w_down, pdl=pdl)
        head = gemv.linear(down, w_up, pdl=pdl)
        act_glu, _ = gemv.add_rms_norm_linear(x, res, nw, EPS, w_up, pdl=pdl, glu=True)  # norm, gate/up, SiLU
        glu = gemv.linear_silu_mul(head[:, :1024].contiguous(), w_up, pdl=pdl)
        return torch.cat([gemv.linear(down, w_o, pdl=pdl), new_res, down, head, act_glu, glu], dim=-1)

    def separate():
        normed, new_res = norm.fused_add_rms_norm(x, res, nw, EPS)
        down = gemv.linear(act.silu_and_mul(gemv.linear(normed, w_up)), w_down)
        head = gemv.linear(down, w_up)
        glu = act.silu_and_mul(gemv.linear(head[:, :1024].contiguous(), w_up))
        act_glu = act.silu_and_mul(gemv.linear(normed, w_up))
        return torch.cat([gemv.linear(down, w_o), new_res, down, head, act_glu, glu], dim=-1)

    assert_chain_equals_defaults(fused, separate)


def test_the_case_set_holds_every_fused_form_in_each_dtype():
    from lab.gates.cases import decode_fused as cases

    names = [c.name for c in cases.CASES]
    assert len(set(names)) == len(names) == 238
    assert Counter(name.split("/")[1] for name in names) == {
        "norm_gemv": 84,
        "gemv_pdl": 22,
        "norm_glu_gemv": 72,
        "glu_gemv": 36,
        "qkv_rope_store": 24,
    }
    assert "fused/norm_gemv/fp32/m8/n83/k2048/exact" not in names  # 64 KB of fp32 rows: the arm declines
    assert "fused/norm_gemv/bf16/m8/n83/k2048/first/pdl" in names
    pdl = [c for c in cases.CASES if c.name.endswith("/pdl")]
    assert {c.flag for c in pdl} == {"VT_GEMV_PDL"} and all(c.arm.endswith("_pdl") for c in pdl)
    assert all(c.tolerance == "exact" for c in cases.CASES if c.name.endswith(("/exact", "/pdl")))
    assert {c.tolerance for c in cases.CASES if not c.name.endswith(("/exact", "/pdl"))} == {"fp32", "bf16", "fp16"}
