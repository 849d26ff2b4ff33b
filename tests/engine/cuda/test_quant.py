"""Tests for the AWQ, GPTQ and NVFP4 kernels (engine/cuda/quant.cu): bit-exact dequant, GEMV within bf16 tolerance."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from engine import kernels
from engine.cuda import build
from engine.flags import FlagSnapshot
from engine.ops.quant import (
    awq_linear,
    dequant_awq,
    dequant_gptq,
    dequant_nvfp4,
    gptq_linear,
    nvfp4_linear,
)
from tests.engine.cuda import quant_pack
from tests.engine.cuda.nvcc_strict import compile_strict, needs_nvcc

gpu = pytest.mark.gpu
# (atol, rtol) of a fused dequant-GEMV against dequant-then-linear, per output dtype: the same products
# summed in another order, rounded once.
GEMV_TOL = {torch.float32: (2e-4, 1e-4), torch.bfloat16: (2e-2, 1.6e-2), torch.float16: (2e-3, 2e-3)}
# (K, N, group): odd widths (the unaligned paths), and (1032, 112, 4): 8-byte AWQ loads, a group change
# inside a K unit and split-K over partly filled column tiles
SHAPES = [(128, 72, 32), (256, 776, 128), (64, 8, 64), (1032, 112, 4)]


@pytest.fixture
def cuda() -> torch.device:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the quant kernels run only on a GPU")
    return torch.device("cuda")


def test_awq_packing_puts_column_one_in_nibble_four():
    """The test packer itself: columns 0..7 read back from nibbles 0,4,1,5,2,6,3,7."""
    word = quant_pack.pack_nibbles(torch.arange(8).unsqueeze(0), quant_pack.AWQ_COLUMN_NIBBLE)
    nibbles = [(int(word) >> (4 * i)) & 0xF for i in range(8)]
    assert [nibbles[n] for n in (0, 4, 1, 5, 2, 6, 3, 7)] == list(range(8))


@needs_nvcc
def test_quant_source_compiles_without_warnings(sm90_werror_dir):
    assert compile_strict("quant.cu", sm90_werror_dir).stat().st_size > 0


def test_awq_dequant_names_a_bad_qzeros_shape():
    from engine.cuda import quant

    ck = quant_pack.awq(64, 16, 32, torch.float16, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"qzeros: shape \(2, 1\) != \[groups=2, N/8=2\]"):
        quant.dequant_awq(ck.qweight, ck.qzeros[:, :1].contiguous(), ck.scales, 32)


@gpu
@pytest.mark.parametrize("k,n,group", SHAPES)
@pytest.mark.parametrize("scale_dtype", [torch.float16, torch.bfloat16])
def test_awq_dequant_is_bit_exact(cuda, k, n, group, scale_dtype):
    from engine.cuda import quant

    ck = quant_pack.awq(k, n, group, scale_dtype, torch.Generator().manual_seed(k + n))
    args = (ck.qweight.to(cuda), ck.qzeros.to(cuda), ck.scales.to(cuda), group)
    for dtype in (torch.bfloat16, torch.float32, None):
        out = quant.dequant_awq(*args, dtype=dtype)
        assert torch.equal(out, dequant_awq(*args, dtype=dtype)), dtype
    assert torch.equal(out.cpu(), ck.dequant(scale_dtype))


@gpu
@pytest.mark.parametrize("k,n,group", SHAPES)
@pytest.mark.parametrize("zero_offset", [1, 0])
def test_gptq_dequant_act_order_is_bit_exact(cuda, k, n, group, zero_offset):
    from engine.cuda import quant

    ck = quant_pack.gptq(k, n, k // group, zero_offset, torch.float16, torch.Generator().manual_seed(k * n))
    args = (ck.qweight.to(cuda), ck.qzeros.to(cuda), ck.scales.to(cuda), ck.groups_of_rows.to(cuda))
    version = 1 if zero_offset else 2
    out = quant.dequant_gptq(*args, 4, version, torch.bfloat16)
    assert torch.equal(out, dequant_gptq(*args, 4, version, torch.bfloat16))
    assert torch.equal(out.cpu(), ck.dequant(torch.bfloat16))


@gpu
@pytest.mark.parametrize("n,k", [(72, 128), (19, 48), (770, 256)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_nvfp4_dequant_is_bit_exact(cuda, n, k, dtype):
    from engine.cuda import quant

    ck = quant_pack.nvfp4(n, k, torch.Generator().manual_seed(n + k))
    args = (ck.packed.to(cuda), ck.scales.to(cuda), ck.global_scale.to(cuda), dtype)
    out = quant.dequant_nvfp4(*args)
    assert torch.equal(out, dequant_nvfp4(*args))
    assert torch.equal(out.cpu(), ck.dequant(dtype))


def _gemv_close(out: torch.Tensor, ref: torch.Tensor) -> None:
    """out against the reference dequant-then-linear, within the output dtype's tolerance."""
    assert out.shape == ref.shape and out.dtype == ref.dtype
    atol, rtol = GEMV_TOL[out.dtype]
    torch.testing.assert_close(out.double(), ref.double(), atol=atol, rtol=rtol)


@gpu
@pytest.mark.parametrize("k,n,group", SHAPES)
@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float32])
def test_awq_gemv_matches_dequant_then_linear(cuda, k, n, group, x_dtype):
    from engine.cuda import quant

    gen = torch.Generator().manual_seed(k - n)
    ck = quant_pack.awq(k, n, group, torch.float16, gen)
    x = torch.randn(1, k, generator=gen).to(x_dtype).to(cuda)
    bias = torch.randn(n, generator=gen).to(x_dtype).to(cuda)
    args = (ck.qweight.to(cuda), ck.qzeros.to(cuda), ck.scales.to(cuda), group)
    _gemv_close(quant.awq_linear(x, *args), awq_linear(x, *args))
    _gemv_close(quant.awq_linear(x, *args, bias=bias), awq_linear(x, *args, bias=bias))


@gpu
@pytest.mark.parametrize("k,n,group", SHAPES)
@pytest.mark.parametrize("zero_offset", [1, 0])
def test_gptq_gemv_matches_dequant_then_linear(cuda, k, n, group, zero_offset):
    from engine.cuda import quant

    gen = torch.Generator().manual_seed(k + 3 * n)
    ck = quant_pack.gptq(k, n, k // group, zero_offset, torch.bfloat16, gen)
    x = torch.randn(k, generator=gen).to(torch.bfloat16).to(cuda)
    args = (
        ck.qweight.to(cuda),
        ck.qzeros.to(cuda),
        ck.scales.to(cuda),
        ck.groups_of_rows.to(cuda),
        4,
        1 if zero_offset else 2,
    )
    out = quant.gptq_linear(x, *args)
    assert out.shape == (n,)
    _gemv_close(out, gptq_linear(x, *args))


@gpu
@pytest.mark.parametrize("n,k", [(72, 128), (19, 48), (770, 2048), (33, 1040)])
def test_nvfp4_gemv_matches_dequant_then_linear(cuda, n, k):
    from engine.cuda import quant

    gen = torch.Generator().manual_seed(n * k)
    ck = quant_pack.nvfp4(n, k, gen)
    x = torch.randn(1, 1, k, generator=gen).to(torch.bfloat16).to(cuda)
    args = (ck.packed.to(cuda), ck.scales.to(cuda), ck.global_scale.to(cuda))
    ref = nvfp4_linear(x, *args)
    _gemv_close(quant.nvfp4_linear(x, *args), ref)
    # the same global scale as a float and as a host tensor (both passed by value)
    for gs in (float(ck.global_scale), ck.global_scale):
        assert torch.equal(quant.nvfp4_linear(x, *args[:2], gs), quant.nvfp4_linear(x, *args))


@gpu
def test_gemv_comparison_catches_a_flipped_nibble(cuda):
    """The GEMV check has teeth: one int4 value changed by one step moves its column past the tolerance."""
    from engine.cuda import quant

    gen = torch.Generator().manual_seed(5)
    ck = quant_pack.awq(128, 64, 128, torch.float16, gen)
    ck.scales[:, 9] = 1.0
    x = torch.ones(1, 128, dtype=torch.float32)  # fp32 x and output: a one-step change is representable
    rest = (ck.qzeros.to(cuda), ck.scales.to(cuda), 128)
    good = quant.awq_linear(x.to(cuda), ck.qweight.to(cuda), *rest)
    bad_q = ck.q.clone()
    bad_q[17, 9] ^= 1
    bad = quant_pack.pack_nibbles(bad_q, quant_pack.AWQ_COLUMN_NIBBLE)
    worse = quant.awq_linear(x.to(cuda), bad.to(cuda), *rest)
    moved = (worse - good).abs().squeeze(0).cpu()
    assert moved[9] == 1.0 and moved[torch.arange(64) != 9].max() == 0


def test_binding_argtypes_match_the_launchers():
    from engine.cuda import quant
    from tests.engine.cuda.signatures import exported

    launchers = exported(build.CUDA_DIR / "quant.cu")
    assert set(quant.SIGNATURES) == set(launchers) - {"vt_quant_last_error"}
    for name, argtypes in quant.SIGNATURES.items():
        assert argtypes == launchers[name], name


@gpu
def test_public_ops_dispatch_to_the_kernels_under_the_flags(cuda):
    from engine.cuda import quant

    gen = torch.Generator().manual_seed(8)
    ck = quant_pack.awq(128, 64, 32, torch.float16, gen)
    args = (ck.qweight.to(cuda), ck.qzeros.to(cuda), ck.scales.to(cuda), 32)
    x = torch.randn(1, 128, generator=gen).to(torch.bfloat16).to(cuda)
    on = FlagSnapshot.defaults().with_(VT_DEQUANT_KERNEL=True, VT_DEQUANT_GEMV=True)
    kernels.reset_counts()
    assert torch.equal(kernels.dequant_awq(on, *args), quant.dequant_awq(*args))
    assert torch.equal(kernels.awq_linear(on, x, *args), quant.awq_linear(x, *args))
    x2 = x.expand(3, 128)  # M = 3: not a GEMV, so dequant (kernel) then linear
    torch.testing.assert_close(kernels.awq_linear(on, x2, *args), x2 @ quant.dequant_awq(*args, dtype=torch.bfloat16))
    nv = quant_pack.nvfp4(64, 128, gen)
    nargs = (nv.packed.to(cuda), nv.scales.to(cuda), nv.global_scale.to(cuda))
    assert torch.equal(kernels.nvfp4_linear(on, x, *nargs), quant.nvfp4_linear(x, *nargs))
    ran = kernels.counts().ran
    assert ran[("awq_linear", "gemv")] == 1 and ran[("awq_linear", "dequant_then_linear")] == 1
    assert ran[("dequant_awq", "cuda")] == 2 and ran[("nvfp4_linear", "gemv")] == 1


def test_global_scale_is_passed_without_a_device_copy(monkeypatch):
    """A float or host global scale goes to the launcher by value, a device one by pointer: nothing is
    copied to the device per call (CUDA-graph capture refuses host-to-device copies)."""
    from engine.cuda import quant

    on_meta = torch.full((1,), 0.25, device="meta")

    def refuse(*args, **kwargs):
        raise AssertionError("a tensor was made or copied")

    host = torch.tensor([0.375])
    monkeypatch.setattr(torch, "tensor", refuse)
    monkeypatch.setattr(torch.Tensor, "to", refuse)
    monkeypatch.setattr(torch.Tensor, "cuda", refuse)
    monkeypatch.setattr(torch.Tensor, "copy_", refuse)
    assert quant.global_scale_arg(0.01, torch.device("cuda")) == (None, 0.01)
    assert quant.global_scale_arg(host, torch.device("cuda")) == (None, 0.375)
    ptr, value = quant.global_scale_arg(on_meta, torch.device("meta"))
    assert ptr is on_meta and value == 0.0
    with pytest.raises(ValueError, match="global_scale: expected device cuda or cpu, got meta"):
        quant.global_scale_arg(on_meta, torch.device("cuda"))
    with pytest.raises(ValueError, match="global_scale: expected one fp32 value"):
        quant.global_scale_arg(host.double(), torch.device("cuda"))


def test_split_counters_are_zeroed_once_per_device(monkeypatch):
    from engine.cuda import quant

    monkeypatch.setattr(quant, "_COUNTERS", {})
    dev = torch.device("cpu")
    first = quant.split_counters(5, dev)
    assert first.dtype == torch.int32 and first.tolist() == [0] * 5
    assert quant.split_counters(5, dev) is first and quant.split_counters(3, dev) is first  # no per-call work
    assert quant.split_counters(9, dev).numel() == 9


@gpu
def test_kernel_paths_are_graph_capturable_and_deterministic(cuda):
    """dequant+linear and the fused GEMVs capture into a CUDA graph (no host copy or sync per call), replay
    to the eager result, and leave the split-K counters zero."""
    from engine.cuda import quant

    gen = torch.Generator().manual_seed(21)
    aw = quant_pack.awq(1024, 4096, 128, torch.float16, gen)
    gq = quant_pack.gptq(1024, 4096, 8, 1, torch.float16, gen)
    nv = quant_pack.nvfp4(4096, 1024, gen)
    x = torch.randn(1, 1024, generator=gen).to(torch.bfloat16).to(cuda)
    a_args = (aw.qweight.to(cuda), aw.qzeros.to(cuda), aw.scales.to(cuda), 128)
    g_args = (gq.qweight.to(cuda), gq.qzeros.to(cuda), gq.scales.to(cuda), gq.groups_of_rows.to(cuda))
    n_args = (nv.packed.to(cuda), nv.scales.to(cuda))
    gs = nv.global_scale.to(cuda)  # moved before the capture: only the ops are under test
    for fused in (False, True):
        f = FlagSnapshot.defaults().with_(VT_DEQUANT_KERNEL=True, VT_DEQUANT_GEMV=fused)
        ops = [
            partial(kernels.awq_linear, f, x, *a_args),
            partial(kernels.gptq_linear, f, x, *g_args),
            partial(kernels.nvfp4_linear, f, x, *n_args, 0.01),
            partial(kernels.nvfp4_linear, f, x, *n_args, gs),
        ]
        for i, op in enumerate(ops):
            eager = op()
            assert torch.equal(op(), eager), (fused, i)  # deterministic: fixed-order split-K sums
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up off the capturing stream, as capture wants
                op()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                captured = op()
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(captured, eager), (fused, i)
    # keyed by the tensors' device (cuda:0), not the fixture's bare `cuda`: every device's counters left zero
    assert quant._COUNTERS and all(int(c.count_nonzero()) == 0 for c in quant._COUNTERS.values())


@gpu
def test_out_of_range_g_idx_gives_nan_rows(cuda):
    """The kernels cannot sync to check g_idx: a row with a group outside [0, G) comes out NaN."""
    from engine.cuda import quant

    ck = quant_pack.gptq(64, 16, 2, 1, torch.float16, torch.Generator().manual_seed(4))
    g_idx = ck.groups_of_rows.clone()
    g_idx[5], g_idx[40] = 2, -1
    args = (ck.qweight.to(cuda), ck.qzeros.to(cuda), ck.scales.to(cuda), g_idx.to(cuda))
    w = quant.dequant_gptq(*args).cpu()
    bad = torch.zeros(64, dtype=torch.bool)
    bad[[5, 40]] = True
    assert w[bad].isnan().all() and not w[~bad].isnan().any()
    assert quant.gptq_linear(torch.ones(64, dtype=torch.float16, device=cuda), *args).isnan().all()


@gpu
def test_launchers_reject_bad_arguments_with_their_message(cuda):
    from engine.cuda import ffi, quant

    lib = quant._lib()
    cases = [  # each call is made just before its check: the last-error message is per library, not per call
        (
            lambda: lib.vt_quant_awq_gemv(
                None, None, None, None, None, None, None, None, 4096, 4096, 128, 1, 2, 1, None
            ),
            "awq gemv: partial and counters workspaces are required",
        ),
        (
            lambda: lib.vt_quant_gptq_gemv(
                None, None, None, None, None, None, None, None, None, 64, 16, 0, 1, 1, 2, 1, None
            ),
            "gptq gemv: groups must be >= 1",
        ),
        (
            lambda: lib.vt_quant_nvfp4_gemv(None, None, None, None, 1.0, None, None, 4, 40, 1, 1, None),
            "nvfp4 gemv: K must be a positive multiple of 16",
        ),
        (
            lambda: lib.vt_quant_nvfp4_gemv(None, None, None, None, 1.0, None, None, 4, 32, 1, 2, None),
            r"nvfp4 gemv: out dtype code 2 must equal x's \(1\)",
        ),
    ]
    for call, message in cases:
        with pytest.raises(RuntimeError, match=message):
            ffi.check(call(), "launcher", lib, "quant")
