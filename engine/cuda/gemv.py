"""Binding for the decode GEMV (gemv.cu): y = x W^T (+ bias) for a few rows of x, output in the caller's dtype; and
the GEMV with the residual add + RMSNorm before it in its prologue (gemv_prologue.cu)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import torch

from engine.cuda import build, device, ffi
from engine.cuda import norm as cuda_norm
from engine.cuda.norm import mean_scale

_P = ctypes.c_void_p
_I = ctypes.c_int
_L = ctypes.c_longlong
_F = ctypes.c_float

MAX_ROWS = 8  # the GEMV reads W once per row of x: past a few rows a GEMM is the better kernel
MAX_STAGED_BYTES = 46 * 1024  # kMaxSmemXBytes: a prologue GEMV builds all its rows of x in shared memory
VECTOR_BYTES = 16  # kVectorBytes: the prologue GEMVs take the 16-byte path only
SPLIT_BELOW_WARPS_PER_SM = 16  # kSplitBelowWarpsPerSm: fewer rows than this per SM split K


SIGNATURES: dict[str, list] = {  # launcher -> argtypes (a test holds them to gemv.cu)
    "vt_gemv_gemv": [_P, _P, _P, _P, _I, _I, _I, _L, _L, _L, _I, _I, _P],
    "vt_gemv_gemv_ex": [_P, _P, _P, _P, _I, _I, _I, _L, _L, _L, _I, _I, _I, _P],
    "vt_gemv_gemv_glu": [_P, _P, _P, _P, _I, _I, _I, _L, _L, _L, _I, _I, _P],
}
PROLOGUE_SIGNATURES: dict[str, list] = {  # gemv_prologue.cu's launcher
    "vt_gemv_prologue_add_rms_norm": [_P] * 7 + [_I] * 3 + [_L] * 5 + [_F, _F] + [_I] * 4 + [_P],
}


@cache
def _lib() -> ctypes.CDLL:
    lib = build.load("gemv.cu")
    for name, argtypes in SIGNATURES.items():
        ffi.bind(lib, name, argtypes)
    return lib


@cache
def _prologue_lib() -> ctypes.CDLL:
    lib = build.load("gemv_prologue.cu")
    for name, argtypes in PROLOGUE_SIGNATURES.items():
        ffi.bind(lib, name, argtypes)
    return lib


def linear(
    x: torch.Tensor,  # x: [..., in_features], at most MAX_ROWS rows
    weight: torch.Tensor,  # weight: [out_features, in_features], x.dtype, last dim contiguous
    bias: torch.Tensor | None = None,  # bias: [out_features], x.dtype
    out_dtype: torch.dtype | None = None,  # default x.dtype: the output follows the caller
    pdl: bool = False,  # launch as a programmatic dependent of the work before it (sm_90): W loads start early
) -> torch.Tensor:  # [..., out_features], out_dtype
    """`F.linear(x, weight, bias)` accumulated in fp32 and rounded once to `out_dtype`: `launch_linear` after the
    checks that name the bad tensor (the entry for a direct call)."""
    if not x.is_cuda:
        raise ValueError(f"x: expected a CUDA tensor, got device {x.device}")
    if x.dim() < 1:
        raise ValueError("x: expected at least 1 dim, got a scalar")
    ffi.require(weight, "weight", dim=2, dtype=x.dtype, device=x.device, contiguous=False)
    n, k = weight.shape
    if x.shape[-1] != k:
        raise ValueError(f"weight: dim 1 is {k} but x's last dim (in_features) is {x.shape[-1]}")
    if bias is not None:
        ffi.require(bias, "bias", dim=1, dtype=x.dtype, device=x.device)
        if bias.shape[0] != n:
            raise ValueError(f"bias: dim 0 is {bias.shape[0]} but weight's out_features is {n}")
    if weight.stride(1) != 1:
        weight = weight.contiguous()
    m = x.numel() // max(k, 1)
    if m > MAX_ROWS:
        raise ValueError(f"x: {m} rows exceed the GEMV's MAX_ROWS={MAX_ROWS}; use a GEMM")
    return launch_linear(x, weight, bias, out_dtype, pdl=pdl)


def launch_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    pdl: bool = False,
) -> torch.Tensor:
    """The GEMV launch, its inputs already checked (by `linear`, or by the table's check and the arm's
    `supports`: at most MAX_ROWS rows, a row-major W, every tensor on x's device)."""
    n, k = weight.shape
    x2, ldx = cuda_norm.rows(x)
    m = x2.shape[0]
    out_dtype = out_dtype or x.dtype
    y = torch.empty(m, n, dtype=out_dtype, device=x.device)
    ldw = weight.stride(0) if n > 1 else k
    lib = _lib()
    args = [
        *ffi.ptrs(y, weight, x2, bias),
        m,
        n,
        k,
        ldw,
        ldx,
        n,
        ffi.dtype_code(x, "x"),
        ffi.dtype_code(y, "out_dtype"),
    ]
    name = "vt_gemv_gemv_ex" if pdl else "vt_gemv_gemv"
    options = [int(pdl)] if pdl else []
    rc = getattr(lib, name)(*args, *options, ffi.stream(x.device))
    ffi.check(rc, name, lib, "gemv")
    return y.view(*x.shape[:-1], n)


def supports_glu(rows: int, weight: torch.Tensor, *rows_of: torch.Tensor) -> bool:
    """Where the GLU GEMV applies: supports_prologue, an even number of W rows (gate, then up), and enough of them that
    the plain GEMV would not split K (so each sum is the plain GEMV's)."""
    n2, k = weight.shape
    if n2 % 2 or not weight.is_cuda or n2 < SPLIT_BELOW_WARPS_PER_SM * device.probe_of(weight).sms:
        return False
    return supports_prologue(rows, k, weight, *rows_of)


def supports_prologue(rows: int, k: int, weight: torch.Tensor, *rows_of: torch.Tensor) -> bool:
    """What a prologue GEMV needs: 1 to MAX_ROWS rows whose K values fit in shared memory, a row-major W, and k,
    W's and each input's row stride multiples of one 16-byte vector (bases aligned)."""
    elt = weight.element_size()
    vec = VECTOR_BYTES // elt
    if not 1 <= rows <= MAX_ROWS or rows * k * elt > MAX_STAGED_BYTES or k % vec:
        return False
    tensors = (weight, *rows_of)
    return weight.stride(-1) == 1 and all(
        t.stride(-1) == 1 and t.data_ptr() % VECTOR_BYTES == 0 and (t.dim() < 2 or t.stride(-2) % vec == 0)
        for t in tensors
    )


def _rows(t: torch.Tensor, name: str, k: int) -> torch.Tensor:
    """`t` as [rows, k] with a contiguous last dim; a copy only where no such view exists."""
    if t.shape[-1] != k:
        raise ValueError(f"{name}: last dim is {t.shape[-1]}, expected {k}")
    t2 = t.reshape(-1, k)
    if t2.stride(-1) != 1 or (t2.shape[0] > 1 and t2.stride(0) < k):
        t2 = t2.contiguous()
    return t2


def _row_stride(t: torch.Tensor) -> int:
    return t.stride(0) if t.shape[0] > 1 else t.shape[1]


def _check_weight(weight: torch.Tensor, x: torch.Tensor, k: int, bias: torch.Tensor | None) -> int:
    ffi.require(weight, "weight", dim=2, dtype=x.dtype, device=x.device, contiguous=False)
    if weight.shape[1] != k:
        raise ValueError(f"weight: dim 1 is {weight.shape[1]} but the GEMV's in_features is {k}")
    if weight.stride(1) != 1:
        raise ValueError(f"weight: last dim must be contiguous (strides {weight.stride()})")
    if bias is not None:
        ffi.require(bias, "bias", dim=1, dtype=x.dtype, device=x.device)
        if bias.shape[0] != weight.shape[0]:
            raise ValueError(f"bias: dim 0 is {bias.shape[0]} but weight's out_features is {weight.shape[0]}")
    return weight.shape[0]


def add_rms_norm_linear(
    x: torch.Tensor,  # x: [..., hidden], the sublayer output
    residual: torch.Tensor | None,  # residual: [..., hidden] or None (the first layer: the norm of x alone)
    norm_weight: torch.Tensor,  # norm_weight: [hidden], x.dtype
    eps: float,
    weight: torch.Tensor,  # weight: [out_features, hidden], x.dtype, row-major
    bias: torch.Tensor | None = None,  # bias: [out_features]
    pdl: bool = False,
    glu: bool = False,  # weight is [2 * inter, hidden] gate/up: y = silu_and_mul(product), [..., inter]
) -> tuple[torch.Tensor, torch.Tensor]:  # (y [..., out_features], new_residual [..., hidden]), x.dtype
    """`linear(rms_norm(x + residual), weight, bias)` in one launch, and the new residual `x + residual`
    (x itself when residual is None); the same bits as the norm kernel then the GEMV kernel (then, with `glu`,
    the SiLU-and-mul kernel)."""

    def refusal(m: int, k: int, rows: list[torch.Tensor]) -> str | None:
        if not supports_prologue(m, k, weight, *rows):
            return f"x: {m} rows of {k} need 1 to {MAX_ROWS} rows within {MAX_STAGED_BYTES} bytes and 16-byte rows"
        if glu and not supports_glu(m, weight, rows[0]):
            return f"weight: {weight.shape[0]} rows are not a gate/up pair that the plain GEMV leaves unsplit"
        return None

    return launch_prologue(_PROLOGUE, refusal, x, residual, norm_weight, eps, weight, bias, pdl=pdl, glu=glu)


def launch_add_rms_norm_linear(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    norm_weight: torch.Tensor,
    eps: float,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    pdl: bool = False,
    glu: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`add_rms_norm_linear`'s launch, its inputs already checked (the table's check and the arm's `supports`)."""
    return run_prologue(_PROLOGUE, x, residual, norm_weight, eps, weight, bias, pdl=pdl, glu=glu)


@dataclass(frozen=True)
class Launcher:
    """A residual add + RMSNorm prologue GEMV launcher: its library (loaded after the checks pass), symbol and error
    family; `out_dtype_code`: it takes y's dtype code after x's (gemv_prologue.cu), not x's alone (gemv_stream.cu)."""

    lib: Callable[[], ctypes.CDLL]
    name: str
    family: str
    out_dtype_code: bool = False


_PROLOGUE = Launcher(_prologue_lib, "vt_gemv_prologue_add_rms_norm", "gemv_prologue", out_dtype_code=True)


def launch_prologue(
    launcher: Launcher,
    refusal: Callable[[int, int, list[torch.Tensor]], str | None],  # (rows, k, [x, residual] as rows): why not, or None
    x: torch.Tensor,  # x: [..., hidden]
    residual: torch.Tensor | None,  # residual: [..., hidden] or None
    norm_weight: torch.Tensor,  # norm_weight: [hidden], x.dtype
    eps: float,
    weight: torch.Tensor,  # weight: [out_features, hidden] (GLU: [2 * inter, hidden]), x.dtype, row-major
    bias: torch.Tensor | None,  # bias: [weight's rows]
    *,
    pdl: bool,
    glu: bool,
) -> tuple[torch.Tensor, torch.Tensor]:  # (y [..., out_features or inter], new_residual [..., hidden]), x.dtype
    """The add + RMSNorm prologue GEMVs' one launch path: the checks naming the tensor, the shape `refusal` of the
    kernel, y and the new residual allocated, the call, its error."""
    if x.dim() < 1:
        raise ValueError("x: expected at least 1 dim, got a scalar")
    k = x.shape[-1]
    if residual is not None and residual.shape != x.shape:
        raise ValueError(f"residual: shape {tuple(residual.shape)} != x's {tuple(x.shape)}")
    if tuple(norm_weight.shape) != (k,):
        raise ValueError(f"norm_weight: shape {tuple(norm_weight.shape)} != (hidden,) = ({k},)")
    if not x.is_cuda:
        raise ValueError(f"x: expected a CUDA tensor, got device {x.device}")
    _check_weight(weight, x, k, bias)
    ffi.require(norm_weight, "norm_weight", dim=1, dtype=x.dtype, device=x.device)
    x2 = _rows(x, "x", k)
    r2 = _rows(residual, "residual", k) if residual is not None else None
    why_not = refusal(x2.shape[0], k, [x2, *([r2] if r2 is not None else [])])
    if why_not is not None:
        raise ValueError(why_not)
    return run_prologue(launcher, x, residual, norm_weight, eps, weight, bias, pdl=pdl, glu=glu)


def run_prologue(
    launcher: Launcher,
    x: torch.Tensor,
    residual: torch.Tensor | None,
    norm_weight: torch.Tensor,
    eps: float,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    *,
    pdl: bool,
    glu: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The add + RMSNorm prologue GEMVs' launch, its inputs already checked (by `launch_prologue`, or by the
    table's check and the arm's `supports`): y and the new residual allocated, the call, its error."""
    n, k = weight.shape
    x2 = cuda_norm.rows(x)[0]
    r2 = cuda_norm.rows(residual)[0] if residual is not None else None
    m = x2.shape[0]
    n_out = n // 2 if glu else n
    y = torch.empty(m, n_out, dtype=x.dtype, device=x.device)
    r_out = torch.empty(m, k, dtype=x.dtype, device=x.device) if r2 is not None else None
    codes = [ffi.dtype_code(x, "x"), *([ffi.dtype_code(y, "y")] if launcher.out_dtype_code else [])]
    lib = launcher.lib()
    rc = getattr(lib, launcher.name)(
        *ffi.ptrs(y, weight, bias, x2, r2, r_out, norm_weight),
        m,
        n_out,
        k,
        weight.stride(0) if n > 1 else k,
        _row_stride(x2),
        _row_stride(r2) if r2 is not None else k,
        k,
        n_out,
        mean_scale(m, k),
        eps,
        *codes,
        int(glu),
        int(pdl),
        ffi.stream(x.device),
    )
    ffi.check(rc, launcher.name, lib, launcher.family)
    new_residual = r_out.view(x.shape) if r_out is not None else x
    return y.view(*x.shape[:-1], n_out), new_residual


def linear_silu_mul(
    x: torch.Tensor,  # x: [..., hidden]
    weight: torch.Tensor,  # weight: [2 * inter, hidden] (gate rows, then up rows), x.dtype, row-major
    bias: torch.Tensor | None = None,  # bias: [2 * inter]
    pdl: bool = False,
) -> torch.Tensor:  # [..., inter], x.dtype
    """`silu_and_mul(linear(x, weight, bias))` in one launch: each warp sums a gate row and its up row (the plain
    GEMV's order, unsplit) and writes the activation; the same bits as the GEMV then the SiLU-and-mul kernel."""
    if x.dim() < 1:
        raise ValueError("x: expected at least 1 dim, got a scalar")
    k = x.shape[-1]
    if not x.is_cuda:
        raise ValueError(f"x: expected a CUDA tensor, got device {x.device}")
    n = _check_weight(weight, x, k, bias)
    x2 = _rows(x, "x", k)
    m = x2.shape[0]
    if not supports_glu(m, weight, x2):
        raise ValueError(
            f"weight: {n} x {k} with {m} rows of x is not a gate/up pair the GLU GEMV takes (1 to {MAX_ROWS} rows, "
            f"16-byte rows, at least {SPLIT_BELOW_WARPS_PER_SM} rows per SM)"
        )
    return launch_linear_silu_mul(x, weight, bias, pdl)


def launch_linear_silu_mul(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, pdl: bool = False
) -> torch.Tensor:
    """The GLU GEMV's launch, its inputs already checked (by `linear_silu_mul`, or by the table's check and the
    arm's `supports`)."""
    n, k = weight.shape
    x2 = cuda_norm.rows(x)[0]
    m = x2.shape[0]
    y = torch.empty(m, n // 2, dtype=x.dtype, device=x.device)
    lib = _lib()
    rc = lib.vt_gemv_gemv_glu(
        *ffi.ptrs(y, weight, x2, bias),
        m,
        n // 2,
        k,
        weight.stride(0),
        _row_stride(x2),
        n // 2,
        ffi.dtype_code(x, "x"),
        int(pdl),
        ffi.stream(x.device),
    )
    ffi.check(rc, "vt_gemv_gemv_glu", lib, "gemv")
    return y.view(*x.shape[:-1], n // 2)
