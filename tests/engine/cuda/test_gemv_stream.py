"""The streamed decode GEMV (engine/cuda/gemv_stream.cu): signatures, the ring plan and the bindings' checks on the CPU,
the launcher's refusals (real nvcc), and on a GPU each form bit for bit against the kernels it replaces, eager, chained
as programmatic dependents, and replayed from a captured CUDA graph."""

from __future__ import annotations

import ctypes

import pytest
import torch

from engine.cuda import act, build, gemv, gemv_stream, norm
from tests.engine.cuda.gemv_chain import assert_chain_equals_defaults, rand
from tests.engine.cuda.signatures import exported

FAMILY = "gemv_stream"  # the conftest's `cuda` and `compiled` fixtures read these
KERNELS = "the streamed GEMV kernels"
EPS = 1e-6
H200 = {"sms": 132, "optin": 227 * 1024}


def test_binding_argtypes_match_the_launchers():
    launchers = exported(build.CUDA_DIR / "gemv_stream.cu")
    assert set(gemv_stream.SIGNATURES) == set(launchers) - {"vt_gemv_stream_last_error"}
    for name, argtypes in gemv_stream.SIGNATURES.items():
        assert argtypes == launchers[name], name


def test_the_source_is_in_the_feature_table():
    assert build.load_table().sources["gemv_stream.cu"] == "portable"


@pytest.mark.parametrize(
    ("rows", "n", "k", "elt", "rows_per_item", "fits"),
    [
        (1, 4096, 1024, 2, 1, True),  # q/k/v: 4 rows per warp, 4 slots of 2 KB
        (1, 151936, 1024, 2, 1, True),  # the head: 6 slots of 2 KB per warp (96 KB a block)
        (1, 1024, 3072, 2, 1, True),  # down: one 6 KB row per warp
        (1, 3072, 1024, 2, 2, True),  # gate/up as GLU: 3 pairs per warp, 3 slots of 4 KB
        (1, 1024, 3072, 4, 1, True),  # fp32 down: one 12 KB row per warp, 96 KB a block
        (1, 4096, 3072, 4, 1, False),  # fp32, 4 rows per warp of 12 KB: one slot fits, two needed
        (1, 151936, 8192, 2, 1, False),  # 16 KB rows: 128 KB a slot, past the ring
    ],
)
def test_the_ring_holds_two_items_per_warp_or_refuses(rows, n, k, elt, rows_per_item, fits):
    assert gemv_stream.supports_ring(rows, n, k, elt, rows_per_item, H200["sms"], H200["optin"]) is fits


def test_the_ring_leaves_room_for_the_staged_rows():
    # 8 rows of K 2048 in bf16 stage 32 KB of x: with a 48 KB opt-in no 32 KB slot is left
    assert gemv_stream.supports_ring(8, 4096, 2048, 2, 1, 132, 227 * 1024)
    assert not gemv_stream.supports_ring(8, 4096, 2048, 2, 1, 132, 48 * 1024)


def test_supports_refuses_a_cpu_weight():
    w = torch.empty(4096, 1024, dtype=torch.bfloat16)
    assert not gemv_stream.supports(1, w, torch.empty(1, 1024, dtype=torch.bfloat16))


def test_bindings_name_the_bad_tensor_before_any_launch():
    with pytest.raises(ValueError) as err:
        gemv_stream.linear(torch.randn(1, 64), torch.randn(16, 64))
    assert str(err.value) == "x: expected a CUDA tensor, got device cpu"
    with pytest.raises(ValueError) as err:
        gemv_stream.add_rms_norm_linear(torch.randn(1, 64), torch.randn(2, 64), torch.ones(64), EPS, torch.randn(8, 64))
    assert str(err.value) == "x: expected a CUDA tensor, got device cpu"


def _gemv_fn(compiled):
    fn = compiled.vt_gemv_stream_gemv
    fn.argtypes = gemv_stream.SIGNATURES["vt_gemv_stream_gemv"]
    err = compiled.vt_gemv_stream_last_error
    err.restype = ctypes.c_char_p
    return fn, err


def test_launcher_refuses_what_the_stream_cannot_take(compiled):
    fn, err = _gemv_fn(compiled)
    aligned = ctypes.c_void_p(256)  # never dereferenced: every refusal comes before a launch
    cases = [
        (9, 1024, 1024, 1024, b"gemv stream: rows 9 outside [1, 8]"),
        (
            1,
            1024,
            1020,
            1020,
            b"gemv stream: k 1020 and the row strides must be multiples of 8, the bases 16-byte aligned",
        ),
        (8, 1024, 3072, 3072, b"gemv stream: 8 rows of 3072 in features exceed 47104 bytes of shared memory"),
        (1, 1024, 1024, 1000, b"gemv stream: weight row stride 1000 < in features 1024"),
    ]
    for m, n, k, ldw, message in cases:
        rc = fn(aligned, aligned, aligned, None, m, n, k, ldw, k, n, 1, 0, 0, None)
        assert rc != 0 and err() == message, (m, n, k)
    rc = fn(aligned, aligned, aligned, None, 1, 64, 64, 64, 64, 64, 5, 0, 0, None)
    assert rc != 0 and err() == b"gemv stream: dtype code 5 is not 0 (fp32), 1 (bf16) or 2 (fp16)"


def test_launcher_refuses_a_machine_without_sm90(compiled):
    if torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9:
        pytest.skip("this machine has an sm_90 GPU: the launcher takes the call")
    fn, err = _gemv_fn(compiled)
    aligned = ctypes.c_void_p(256)
    rc = fn(aligned, aligned, aligned, None, 1, 64, 64, 64, 64, 64, 1, 0, 0, None)
    assert rc != 0 and err() == b"gemv stream: bulk copies into shared memory need sm_90 or newer"


@pytest.mark.gpu
@pytest.mark.parametrize("pdl", [False, True])
def test_streamed_forms_equal_the_kernels_they_replace_eager_and_in_a_graph(cuda, pdl):
    if torch.cuda.get_device_capability(cuda)[0] < 9:
        pytest.skip("the streamed GEMV needs sm_90")
    g = torch.Generator().manual_seed(0)
    x, res = rand(g, cuda, 1, 1024), rand(g, cuda, 1, 1024)
    nw = (torch.rand(1024, generator=g) + 0.5).to(torch.bfloat16).to(cuda)
    w_qkv, w_o = rand(g, cuda, 4096, 1024, scale=1 / 32), rand(g, cuda, 1024, 2048, scale=1 / 45)
    w_up, w_down = rand(g, cuda, 6144, 1024, scale=1 / 32), rand(g, cuda, 1024, 3072, scale=1 / 55)
    w_head = rand(g, cuda, 151936, 1024, scale=1 / 32)

    def streamed():  # one layer's GEMVs and the head, each a programmatic dependent of the one before under pdl
        qkv, new_res = gemv_stream.add_rms_norm_linear(x, res, nw, EPS, w_qkv, pdl=pdl)
        o = gemv_stream.linear(qkv[:, :2048].contiguous(), w_o, pdl=pdl)
        act_glu, res2 = gemv_stream.add_rms_norm_linear(o, new_res, nw, EPS, w_up, pdl=pdl, glu=True)
        down = gemv_stream.linear(act_glu, w_down, pdl=pdl)
        glu = gemv_stream.linear(down, w_up, pdl=pdl, glu=True)
        head = gemv_stream.linear(down, w_head, pdl=pdl)
        return torch.cat([qkv, new_res, o, act_glu, res2, down, glu, head], dim=-1)

    def separate():
        normed, new_res = norm.fused_add_rms_norm(x, res, nw, EPS)
        qkv = gemv.linear(normed, w_qkv)
        o = gemv.linear(qkv[:, :2048].contiguous(), w_o)
        normed2, res2 = norm.fused_add_rms_norm(o, new_res, nw, EPS)
        act_glu = act.silu_and_mul(gemv.linear(normed2, w_up))
        down = gemv.linear(act_glu, w_down)
        glu = act.silu_and_mul(gemv.linear(down, w_up))
        head = gemv.linear(down, w_head)
        return torch.cat([qkv, new_res, o, act_glu, res2, down, glu, head], dim=-1)

    assert_chain_equals_defaults(streamed, separate)


def test_the_case_set_offers_only_shapes_the_arm_takes():
    from lab.gates.cases import gemv_stream as cases

    names = {c.name for c in cases.CASES}
    assert len(names) == len(cases.CASES) == 195
    # fp32 refuses 8 rows of K 2048 (64 KB of staged x) and GLU pairs of K 1024 (one ring slot); bf16 takes both
    assert "fused/gemv_stream/bf16/m8/n83/k2048/exact" in names
    assert "fused/gemv_stream/fp32/m8/n83/k2048/exact" not in names
    assert "fused/glu_gemv_stream/bf16/m1/n6144/k1024/first/pdl" in names
    assert "fused/glu_gemv_stream/fp32/m1/n6144/k1024/first/pdl" not in names
    assert {c.flag for c in cases.CASES} == {"VT_GEMV_STREAM", "VT_GEMV_PDL"}
    assert all(c.tolerance == "exact" for c in cases.CASES if c.name.endswith(("/exact", "/pdl")))
