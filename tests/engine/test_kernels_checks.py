"""A tensor is checked once a table call: the op's check (ranks, dtypes, sizes), then the arm's `supports` (what the
kernel needs past it), then the binding's launch, which checks nothing again. The bindings' checked entries stay
for direct calls (tests/engine/cuda)."""

from __future__ import annotations

from functools import partial

import torch

from engine import kernels
from engine.cuda import gemm_small as cuda_gemm_small
from engine.cuda import gemv as cuda_gemv
from engine.cuda import gemv_stream as cuda_stream
from engine.cuda import norm as cuda_norm
from engine.kernels import gemv as gemv_family


def _kernel_of(op: kernels.Op, arm: str) -> object:
    kernel = op.arm(arm).kernel
    return kernel.func if isinstance(kernel, partial) else kernel


def test_the_norm_and_linear_arms_launch_without_checking_again() -> None:
    for op in (kernels.rms_norm, kernels.qk_norm):
        assert _kernel_of(op, "cuda") is cuda_norm.launch_rms_norm
    assert _kernel_of(kernels.fused_add_rms_norm, "cuda") is cuda_norm.launch_fused_add_rms_norm
    launches = {arm.name: _kernel_of(kernels.linear, arm.name) for arm in kernels.linear.arms}
    assert launches == {
        "gemv_stream_pdl": cuda_stream.launch_linear,
        "gemv_stream": cuda_stream.launch_linear,
        "gemv_pdl": cuda_gemv.launch_linear,
        "gemv": cuda_gemv.launch_linear,
        "gemm_small": cuda_gemm_small.launch_linear,
    }
    prologues = {cuda_stream.launch_add_rms_norm_linear, cuda_gemv.launch_add_rms_norm_linear}
    for op, extra in (
        (kernels.add_rms_norm_linear, {cuda_gemm_small.launch_add_rms_norm_linear}),
        (kernels.add_rms_norm_linear_silu_mul, set()),
    ):
        fused = {a.name: _kernel_of(op, a.name) for a in op.arms if not a.composite}
        assert set(fused.values()) == prologues | extra
    assert [a.name for a in kernels.silu_mul_linear.arms] == ["act_then_linear"]  # its prologue GEMV is retired
    glu = {a.name: _kernel_of(kernels.linear_silu_mul, a.name) for a in kernels.linear_silu_mul.arms[:4]}
    assert glu == {
        "glu_stream_pdl": cuda_stream.launch_linear,
        "glu_stream": cuda_stream.launch_linear,
        "glu_pdl": cuda_gemv.launch_linear_silu_mul,
        "glu": cuda_gemv.launch_linear_silu_mul,
    }


def test_the_norm_predicate_holds_what_the_ops_check_leaves_to_the_kernel() -> None:
    x, w = torch.ones(2, 8), torch.ones(8)
    assert cuda_norm.supports(x, w, 1e-6)
    assert not cuda_norm.supports(x, torch.ones(16)[::2], 1e-6)  # a strided weight: the kernel reads it densely
    assert not cuda_norm.supports(x, torch.ones(8, device="meta"), 1e-6)  # another device
    assert cuda_norm.supports_add(x, torch.ones(2, 8), w, 1e-6)
    assert not cuda_norm.supports_add(x, torch.ones(2, 8, device="meta"), w, 1e-6)


def test_the_gemv_predicate_holds_the_rows_the_layout_and_the_device() -> None:
    x, w = torch.ones(2, 64), torch.ones(16, 64)
    assert gemv_family.supports_rows(x, w)
    assert not gemv_family.supports_rows(torch.ones(cuda_gemv.MAX_ROWS + 1, 64), w)  # a prefill: the GEMM
    assert not gemv_family.supports_rows(x, torch.ones(64, 16).T)  # a transposed W
    assert not gemv_family.supports_rows(x, torch.ones(16, 64, device="meta"))
    assert not gemv_family.supports_rows(x, w, torch.ones(16, device="meta"))  # the bias on another device
    for fused in (gemv_family.supports_glu, gemv_family.supports_glu_stream):
        assert not fused(x, torch.ones(16, 64, device="meta"))  # W on another device: declined before its shape


def test_the_norm_prologue_predicate_holds_the_devices_and_a_contiguous_norm_weight() -> None:
    x, res, nw, w = torch.ones(1, 64), torch.ones(1, 64), torch.ones(64), torch.ones(16, 64)
    assert gemv_family.supports_norm_prologue(x, res, nw, 1e-6, w)
    assert gemv_family.supports_norm_prologue(x, None, nw, 1e-6, w)  # the first layer: no residual yet
    assert not gemv_family.supports_norm_prologue(x, res, torch.ones(128)[::2], 1e-6, w)  # a strided norm weight
    assert not gemv_family.supports_norm_prologue(x, torch.ones(1, 64, device="meta"), nw, 1e-6, w)
    assert not gemv_family.supports_norm_prologue(x, res, nw, 1e-6, w, torch.ones(16, device="meta"))
