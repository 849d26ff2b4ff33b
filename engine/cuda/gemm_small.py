"""Binding for the small decode GEMM (gemm_small.cu): y = x W^T for 2 to 32 rows of x (bf16/fp16, fp32
accumulation in mma.sync tiles, y in x's dtype), plain and with the residual add + RMSNorm prologue. Its sums are
not cuBLAS's order, so its arms are held behind VT_GEMM_SMALL (default OFF) until a flip."""

from __future__ import annotations

import ctypes
from functools import cache

import torch

from engine.cuda import build, device, ffi
from engine.cuda import gemv as cuda_gemv
from engine.cuda import norm as cuda_norm

_P = ctypes.c_void_p
_I = ctypes.c_int
_L = ctypes.c_longlong

MIN_ROWS = 2  # kMinRows: one row takes the GEMV
MAX_ROWS = 32  # kMaxRows: two m16 MMA tiles
VECTOR = 8  # kVec: k and the row strides in 16-byte vectors of 2-byte elements
X_PAD = 32  # kXPad: elements past k in a staged row of x
WARPS = 8  # kWarps
STATIC_RESERVE = 1024  # kStaticReserve: opt-in shared memory kept for the kernel's static arrays
DTYPES = (torch.bfloat16, torch.float16)

SIGNATURES: dict[str, list] = {  # launcher -> argtypes (a test holds them to gemm_small.cu)
    "vt_gemm_small_gemm": [_P, _P, _P, _I, _I, _I, _L, _L, _L, _I, _P],
    "vt_gemm_small_add_rms_norm": cuda_gemv.PROLOGUE_SIGNATURES["vt_gemv_prologue_add_rms_norm"],
}


@cache
def _lib() -> ctypes.CDLL:
    lib = build.load("gemm_small.cu")
    for name, argtypes in SIGNATURES.items():
        ffi.bind(lib, name, argtypes)
    return lib


def smem_bytes(rows: int, k: int, elt: int) -> int:
    """gemm_small_smem() at the widest tile (NT 4), which the launcher checks against the opt-in limit."""
    return max(rows * (k + X_PAD) * elt, WARPS * MAX_ROWS * 8 * 4 * 4)


def supports(rows: int, weight: torch.Tensor, *rows_of: torch.Tensor, bias: torch.Tensor | None = None) -> bool:
    """Where the small GEMM applies: 2 to 32 rows of bf16/fp16 on a GPU, no bias, a row-major W, k and every row
    stride a multiple of 8 elements with 16-byte aligned bases, and the staged rows within the opt-in shared memory."""
    if not weight.is_cuda or weight.dtype not in DTYPES or bias is not None or not MIN_ROWS <= rows <= MAX_ROWS:
        return False
    k = weight.shape[1]
    if k % VECTOR or smem_bytes(rows, k, weight.element_size()) + STATIC_RESERVE > device.probe_of(weight).smem_optin:
        return False
    return all(
        t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and (t.dim() < 2 or t.shape[0] == 1 or t.stride(-2) % VECTOR == 0)
        for t in (weight, *rows_of)
    )


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`x @ weight.T` for 2 to 32 rows of x ([..., k] -> [..., n]); the checks name the bad tensor."""
    if x.dim() < 1 or not x.is_cuda:
        raise ValueError(f"x: expected a CUDA tensor of at least 1 dim, got {tuple(x.shape)} on {x.device}")
    k = x.shape[-1]
    cuda_gemv._check_weight(weight, x, k, None)
    x2 = cuda_gemv._rows(x, "x", k)
    if not supports(x2.shape[0], weight, x2):
        raise ValueError(
            f"x: {x2.shape[0]} rows of {k} with weight {tuple(weight.shape)} {weight.dtype} are not a shape the small "
            f"GEMM takes ({MIN_ROWS} to {MAX_ROWS} rows, bf16/fp16, 16-byte rows, within shared memory)"
        )
    return launch_linear(x, weight)


def launch_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The launch, its inputs already checked (by `linear`, or by the table's check and the arm's `supports`, which
    refuses a bias)."""
    n, k = weight.shape
    x2, ldx = cuda_norm.rows(x)
    y = torch.empty(x2.shape[0], n, dtype=x.dtype, device=x.device)
    lib = _lib()
    rc = lib.vt_gemm_small_gemm(
        *ffi.ptrs(y, weight, x2),
        x2.shape[0],
        n,
        k,
        weight.stride(0) if n > 1 else k,
        ldx,
        n,
        ffi.dtype_code(x, "x"),
        ffi.stream(x.device),
    )
    ffi.check(rc, "vt_gemm_small_gemm", lib, "gemm_small")
    return y.view(*x.shape[:-1], n)


_LAUNCHER = cuda_gemv.Launcher(_lib, "vt_gemm_small_add_rms_norm", "gemm_small", out_dtype_code=True)


def add_rms_norm_linear(
    x: torch.Tensor,  # x: [..., hidden], the sublayer output
    residual: torch.Tensor | None,  # residual: [..., hidden] or None (the norm of x alone)
    norm_weight: torch.Tensor,  # norm_weight: [hidden], x.dtype
    eps: float,
    weight: torch.Tensor,  # weight: [out_features, hidden], x.dtype, row-major
) -> tuple[torch.Tensor, torch.Tensor]:  # (y [..., out_features], new_residual [..., hidden]), x.dtype
    """`linear(rms_norm(x + residual), weight)` in one launch for 2 to 32 rows, and the new residual; the norm's
    bits are the norm kernel's, the product the small GEMM's."""

    def refusal(m: int, k: int, rows: list[torch.Tensor]) -> str | None:
        if supports(m, weight, *rows):
            return None
        return f"x: {m} rows of {k} are not a shape the small GEMM takes ({MIN_ROWS} to {MAX_ROWS} rows, bf16/fp16)"

    return cuda_gemv.launch_prologue(
        _LAUNCHER, refusal, x, residual, norm_weight, eps, weight, None, pdl=False, glu=False
    )


def launch_add_rms_norm_linear(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    norm_weight: torch.Tensor,
    eps: float,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`add_rms_norm_linear`'s launch, its inputs already checked (the table's check and the arm's `supports`)."""
    return cuda_gemv.run_prologue(_LAUNCHER, x, residual, norm_weight, eps, weight, bias, pdl=False, glu=False)
