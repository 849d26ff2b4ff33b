"""The GEMV family: `linear` (the streamed and plain GEMV, each also as a programmatic dependent launch),
`embedding`, and the decode step's fused launches (ENGINE-PERF): a pre-norm in a GEMV's prologue, the gated MLP's
activation in its epilogue; each fused op's last arm runs the table's own ops one by one; the small GEMM (2 to 32
rows; VT_GEMM_SMALL, OFF: when on it comes first; its norm-prologue form by name only). Unasked, the table gives
the GEMVs 1 or 2 rows (GEMV_TAKES_ROWS) and the small GEMM 3-8 rows of a narrow projection (GEMM_SMALL_TAKES_*).
Which of them a decoder layer calls is the table's choice too (engine/kernels/layer.py). The persistent GEMV and the
activation in the down GEMV's prologue lost their A/Bs at every measured shape and were retired (docs/BENCHMARKS.md)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from engine.cuda import gemm_small as cuda_gemm_small
from engine.cuda import gemv as cuda_gemv
from engine.cuda import gemv_stream as cuda_stream
from engine.kernels.table import KERNEL, Arm, Op, by_parts, gated_by, supports_any
from engine.ops import gemv


def _on_x_device(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    return weight.device == x.device and (bias is None or bias.device == x.device)


def supports_rows(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> bool:
    """Decode rows (at most MAX_ROWS) of a row-major W take the GEMV, which streams W by rows; a prefill, or
    a transposed W (dequant-then-linear's W.T), keeps the GEMM, which reads it in place. W and the bias on x's
    device: with the op's check (ranks, dtypes, sizes) all the `linear` arms' launches need, so they check nothing
    again (each tensor is checked once a call)."""
    rows_ok = x.numel() <= cuda_gemv.MAX_ROWS * x.shape[-1] and weight.stride(-1) == 1
    return _on_x_device(x, weight, bias) and rows_ok


def supports_stream(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> bool:
    x2 = x.reshape(-1, x.shape[-1])
    return supports_rows(x, weight, bias) and cuda_stream.supports(x2.shape[0], weight, x2)


_STREAM_NEEDS = (
    f"1 to {cuda_gemv.MAX_ROWS} rows in {cuda_gemv.MAX_STAGED_BYTES} bytes, 16-byte rows, a row-major W, and "
    f"a ring of two W rows (GLU: two gate/up pairs) per warp within {cuda_stream.RING_BYTES} bytes of shared memory"
)


_PDL = gated_by("VT_GEMV_PDL")


def supports_gemm_small(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> bool:
    """2 to 32 rows (a batch of decode tokens), W and x as the small GEMM takes them, on x's device."""
    x2 = x.reshape(-1, x.shape[-1])
    return _on_x_device(x, weight, bias) and cuda_gemm_small.supports(x2.shape[0], weight, x2, bias=bias)


def _won_range(lo: int, hi: int, max_outputs: int = 0) -> Callable[..., Arm]:
    """`Arm` with the range its A/B won: `lo` to `hi` rows of x and, when given, at most `max_outputs` rows of W
    (a `linear` arm's: W is its second argument); the note is the reason a call past it is counted under."""

    def takes(x: torch.Tensor, *args: Any, **kwargs: Any) -> bool:
        rows_ok = lo * x.shape[-1] <= x.numel() <= hi * x.shape[-1]
        return rows_ok and (not max_outputs or args[0].shape[0] <= max_outputs)

    outputs = f", at most {max_outputs} outputs" if max_outputs else ""
    return partial(Arm, takes=takes, takes_note=f"{lo}-{hi} rows{outputs} unasked (its A/B's range)")


# The small GEMM's won range, 3-8 rows of a narrow projection: at 8 rows against cuBLAS (H200, fb20a0e) o 1.21x and
# down 1.22x (n 1024); q/k/v 0.91x and gate/up 0.82x lose, as do the norm-prologue forms (0.72-0.77x, by name only
# now) and every form at 32 rows (0.56-0.73x). Below 3 rows the GEMVs keep theirs.
GEMM_SMALL_TAKES_ROWS, GEMM_SMALL_TAKES_N = (3, 8), 1024
_narrow = _won_range(*GEMM_SMALL_TAKES_ROWS, GEMM_SMALL_TAKES_N)


_GEMM_SMALL = gated_by("VT_GEMM_SMALL")
_GEMM_SMALL_NEEDS = (
    f"{cuda_gemm_small.MIN_ROWS} to {cuda_gemm_small.MAX_ROWS} rows of bf16/fp16, no bias, a row-major W, k and the "
    f"row strides multiples of {cuda_gemm_small.VECTOR}, the rows within the opt-in shared memory"
)


# The decode rows the table gives a GEMV arm: it reads W once per row of x, and in the graphed step cuBLAS is
# faster from 3 rows (VT_GEMV off/on, 2026-12-05 records `ab-vt-gemv-b*-h200|h100`: H200 1.060 at b2, 0.853 at b4,
# 0.553 at b8; H100 1.004 at b2, 0.787 at b3). The kernels take up to MAX_ROWS, as their cases and tests do.
GEMV_TAKES_ROWS = 2


def _with_pdl(
    name: str, flags: tuple[str, ...], supports: Callable[..., bool], needs: str, kernel: Callable, **device: Any
) -> list:
    """A GEMV arm after its programmatic dependent launch: `<name>_pdl`, gated by VT_GEMV_PDL too (before the
    last flag, VT_GEMV), with the same support and device needs (`device`: Arm's capability, smem_optin) and the
    kernel called with pdl=True. The table takes either for up to GEMV_TAKES_ROWS rows."""
    with_pdl = (*flags[:-1], *_PDL, flags[-1])
    rows = _won_range(1, GEMV_TAKES_ROWS)
    return [
        rows(f"{name}_pdl", with_pdl, supports, needs, partial(kernel, pdl=True), **device),
        rows(name, flags, supports, needs, kernel, **device),
    ]


# what the streamed GEMV's arms need of the device, checked by the table against its probe
_STREAM_DEVICE = {"capability": cuda_stream.CAPABILITY, "smem_optin": cuda_stream.SMEM_OPTIN}


linear = Op(
    gemv.linear,
    gemv.check_linear,
    [
        _narrow("gemm_small", _GEMM_SMALL, supports_gemm_small, _GEMM_SMALL_NEEDS, cuda_gemm_small.launch_linear),
        *_with_pdl(
            "gemv_stream",
            gated_by("VT_GEMV_STREAM", "VT_GEMV"),
            supports_stream,
            _STREAM_NEEDS,
            cuda_stream.launch_linear,
            **_STREAM_DEVICE,
        ),
        *_with_pdl(
            "gemv",
            gated_by("VT_GEMV"),
            supports_rows,
            f"at most {cuda_gemv.MAX_ROWS} rows and a row-major weight, on x's device",
            cuda_gemv.launch_linear,
        ),
    ],
)
embedding = Op(gemv.embedding, gemv.check_embedding)


# --- the decode step's fused launches (ENGINE-PERF): each op's last arm runs the table's own ops one by one ---
def _norm_rows(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    norm_weight: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
) -> list[torch.Tensor] | None:
    """x and the residual as [rows, hidden], for a norm-prologue GEMV's shape predicate, when its launch has what it
    needs past the op's check: every tensor on x's device and a contiguous norm weight (its launch then checks
    nothing again); None when not."""
    same = all(t is None or t.device == x.device for t in (residual, norm_weight, weight, bias))
    if not (same and norm_weight.is_contiguous()):
        return None
    return [t.reshape(-1, x.shape[-1]) for t in (x, residual) if t is not None]


def supports_norm_prologue(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    norm_weight: torch.Tensor,
    eps: float,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> bool:
    rows = _norm_rows(x, residual, norm_weight, weight, bias)
    return rows is not None and cuda_gemv.supports_prologue(rows[0].shape[0], x.shape[-1], weight, *rows)


def supports_norm_gemm_small(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    norm_weight: torch.Tensor,
    eps: float,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> bool:
    rows = _norm_rows(x, residual, norm_weight, weight, bias)
    return rows is not None and cuda_gemm_small.supports(rows[0].shape[0], weight, *rows, bias=bias)


def supports_glu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> bool:
    x2 = x.reshape(-1, x.shape[-1])
    return _on_x_device(x, weight, bias) and cuda_gemv.supports_glu(x2.shape[0], weight, x2)


def supports_norm_stream(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    norm_weight: torch.Tensor,
    eps: float,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    glu: bool = False,
) -> bool:
    rows = _norm_rows(x, residual, norm_weight, weight, bias)
    return rows is not None and cuda_stream.supports(rows[0].shape[0], weight, *rows, glu=glu)


def supports_glu_stream(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> bool:
    x2 = x.reshape(-1, x.shape[-1])
    return _on_x_device(x, weight, bias) and cuda_stream.supports(x2.shape[0], weight, x2, glu=True)


def supports_norm_glu(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    norm_weight: torch.Tensor,
    eps: float,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> bool:
    return supports_norm_prologue(x, residual, norm_weight, eps, weight, bias) and supports_glu(x, weight, bias)


_GLU_NEEDS = (
    f"1 to {cuda_gemv.MAX_ROWS} rows in {cuda_gemv.MAX_STAGED_BYTES} bytes, 16-byte rows, a row-major gate/up W "
    f"with at least {cuda_gemv.SPLIT_BELOW_WARPS_PER_SM} rows per SM"
)
_PROLOGUE_NEEDS = f"1 to {cuda_gemv.MAX_ROWS} rows in {cuda_gemv.MAX_STAGED_BYTES} bytes, 16-byte rows, a row-major W"
add_rms_norm_linear = Op(
    gemv.add_rms_norm_linear,
    gemv.check_add_rms_norm_linear,
    [
        *_with_pdl(
            "prologue_stream",
            gated_by("VT_NORM_GEMV", "VT_GEMV_STREAM", "VT_GEMV"),
            supports_norm_stream,
            _STREAM_NEEDS,
            cuda_stream.launch_add_rms_norm_linear,
            **_STREAM_DEVICE,
        ),
        *_with_pdl(
            "prologue",
            gated_by("VT_NORM_GEMV", "VT_GEMV"),
            supports_norm_prologue,
            _PROLOGUE_NEEDS,
            cuda_gemv.launch_add_rms_norm_linear,
        ),
        Arm(
            "norm_then_linear",
            gated_by(),
            supports_any,
            KERNEL,
            by_parts(gemv.add_rms_norm_linear.glue),
            composite=True,
        ),
    ],
    # the small GEMM's prologue form lost at every measured shape: by name only (VT_ARM, its cases' binding)
    by_name=[
        Arm(
            "prologue_gemm_small",
            gated_by(),
            supports_norm_gemm_small,
            _GEMM_SMALL_NEEDS,
            cuda_gemm_small.launch_add_rms_norm_linear,
        )
    ],
)


# the activation, then the down GEMV (its prologue form lost its A/B: retired)
silu_mul_linear = Op(
    gemv.silu_mul_linear,
    gemv.check_silu_mul_linear,
    [Arm("act_then_linear", gated_by(), supports_any, KERNEL, by_parts(gemv.silu_mul_linear.glue), composite=True)],
)
linear_silu_mul = Op(
    gemv.linear_silu_mul,
    gemv.check_linear_silu_mul,
    [
        *_with_pdl(
            "glu_stream",
            gated_by("VT_GLU_GEMV", "VT_GEMV_STREAM", "VT_GEMV"),
            supports_glu_stream,
            _STREAM_NEEDS,
            partial(cuda_stream.launch_linear, glu=True),
            **_STREAM_DEVICE,
        ),
        *_with_pdl(
            "glu", gated_by("VT_GLU_GEMV", "VT_GEMV"), supports_glu, _GLU_NEEDS, cuda_gemv.launch_linear_silu_mul
        ),
        Arm("linear_then_act", gated_by(), supports_any, KERNEL, by_parts(gemv.linear_silu_mul.glue), composite=True),
    ],
)
add_rms_norm_linear_silu_mul = Op(
    gemv.add_rms_norm_linear_silu_mul,
    gemv.check_add_rms_norm_linear_silu_mul,
    [
        *_with_pdl(
            "prologue_glu_stream",
            gated_by("VT_NORM_GEMV", "VT_GLU_GEMV", "VT_GEMV_STREAM", "VT_GEMV"),
            partial(supports_norm_stream, glu=True),
            _STREAM_NEEDS,
            partial(cuda_stream.launch_add_rms_norm_linear, glu=True),
            **_STREAM_DEVICE,
        ),
        *_with_pdl(
            "prologue_glu",
            gated_by("VT_NORM_GEMV", "VT_GLU_GEMV", "VT_GEMV"),
            supports_norm_glu,
            _GLU_NEEDS,
            partial(cuda_gemv.launch_add_rms_norm_linear, glu=True),
        ),
        Arm(
            "norm_gemv_then_act",
            gated_by("VT_NORM_GEMV"),
            supports_any,
            KERNEL,
            by_parts(gemv.add_rms_norm_linear_silu_mul.glue),
            composite=True,
        ),
        Arm(  # the pre-norm, then the GLU GEMV op
            "norm_then_glu",
            gated_by(),
            supports_any,
            KERNEL,
            by_parts(gemv.add_rms_norm_linear.glue, instead={"linear": "linear_silu_mul"}),
            composite=True,
        ),
    ],
)
