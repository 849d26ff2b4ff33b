"""Tests for the SiLU-and-mul kernel (engine/cuda/act.cu) against engine.ops.act on the GPU."""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import pytest
import torch

from engine import kernels
from engine.cuda import build
from engine.flags import REFERENCE, FlagSnapshot
from engine.ops.act import silu_and_mul

needs_nvcc = pytest.mark.skipif(
    shutil.which("nvcc") is None and not Path(build.NVCC).exists(),
    reason="nvcc not found: the CUDA sources cannot be compiled here",
)
gpu = pytest.mark.gpu
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
SHAPES = [(7, 2 * 769), (3, 5, 2 * 111), (1, 2 * 3072), (2, 2)]

FAMILY = "act"  # the conftest's `cuda` and `compiled` fixtures read these
KERNELS = "the activation kernels"


@needs_nvcc
def test_launcher_rejects_bad_arguments_before_any_launch(compiled):
    p, i, ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
    fn = compiled.vt_act_silu_and_mul
    fn.argtypes = [p, p, i, i, ll, ll, i, p]
    compiled.vt_act_last_error.restype = ctypes.c_char_p
    assert fn(None, None, 3, 8, 15, 8, 1, None) == 1000
    assert compiled.vt_act_last_error() == b"act: x row stride 15 < 2 * inter (16)"
    assert fn(None, None, 3, 0, 16, 8, 1, None) == 1000
    assert compiled.vt_act_last_error() == b"act: intermediate size 0 outside [1, 16776960]"
    assert fn(None, None, 3, 8, 16, 8, 3, None) == 1001
    assert compiled.vt_act_last_error() == b"act: dtype code 3 is not 0 (fp32), 1 (bf16) or 2 (fp16)"


def test_binding_rejects_a_cpu_tensor():
    from engine.cuda import act

    with pytest.raises(ValueError, match="x: expected a CUDA tensor, got device cpu"):
        act.silu_and_mul(torch.randn(3, 8))


@gpu
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_and_mul_is_bitwise_the_reference(cuda, shape, dtype):
    from engine.cuda import act

    g = torch.Generator().manual_seed(sum(shape))
    x = (torch.randn(shape, generator=g) * 4).to(dtype).to(cuda)
    got, want = act.silu_and_mul(x), silu_and_mul(x)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert torch.equal(got, want), f"{(got != want).sum().item()} of {got.numel()} elements differ"


@gpu
def test_silu_and_mul_reads_strided_rows_and_extremes(cuda):
    from engine.cuda import act

    wide = torch.randn(6, 3 * 94, dtype=torch.bfloat16, device=cuda) * 30  # large |x|: exp under/overflow
    x = wide[:, 10 : 10 + 2 * 94]
    x[0, :4] = torch.tensor([float("inf"), float("-inf"), 0.0, -0.0], dtype=torch.bfloat16)
    got, want = act.silu_and_mul(x), silu_and_mul(x)
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got.nan_to_num(), want.nan_to_num())


@gpu
def test_the_table_runs_the_kernel_only_under_both_flags(cuda):
    x = torch.randn(5, 2 * 37, device=cuda, dtype=torch.bfloat16)
    want = silu_and_mul(x)  # the pure reference
    kernels.reset_counts()
    assert torch.equal(kernels.silu_and_mul(FlagSnapshot.defaults(), x), want)  # VT_ACT_KERNEL is on by default
    kernels.silu_and_mul(FlagSnapshot.defaults().with_(VT_ACT_KERNEL=False), x)
    kernels.silu_and_mul(REFERENCE, x)
    assert kernels.counts().ran == {("silu_and_mul", "cuda"): 1, ("silu_and_mul", "reference"): 2}


def test_binding_argtypes_match_the_launchers():
    from engine.cuda import act
    from tests.engine.cuda.signatures import exported

    launchers = exported(build.CUDA_DIR / "act.cu")
    assert set(act.SIGNATURES) == set(launchers) - {"vt_act_last_error"}
    for name, argtypes in act.SIGNATURES.items():
        assert argtypes == launchers[name], name
