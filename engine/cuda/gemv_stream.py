"""Binding for the streamed decode GEMV (gemv_stream.cu, sm_90): W through shared memory by bulk copies, a resident
grid of one block per SM; plain, GLU (SiLU-and-mul epilogue) and with the residual add + RMSNorm prologue. The same
bits as the fast-path GEMV kernels (gemv.py) it stands in for."""

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
_F = ctypes.c_float

WARPS = 8  # kWarps: a block's warps, each with its own ring of row buffers
MAX_SLOTS = 8  # kMaxSlots
RING_BYTES = 96 * 1024  # kRingBytes: a block's rings at most
X_ALIGN = 128  # kXAlign
STATIC_RESERVE = 1024  # kStaticReserve in plan(): the static barriers and norm partials
CAPABILITY = (9, 0)  # bulk copies into shared memory (cp.async.bulk) and its mbarriers
# the ring plan() is tuned for: a device that cannot give a block this much runs the other GEMVs
SMEM_OPTIN = RING_BYTES + STATIC_RESERVE

SIGNATURES: dict[str, list] = {  # launcher -> argtypes (a test holds them to gemv_stream.cu)
    "vt_gemv_stream_gemv": [_P, _P, _P, _P, _I, _I, _I, _L, _L, _L, _I, _I, _I, _P],
    "vt_gemv_stream_add_rms_norm": [_P] * 7 + [_I] * 3 + [_L] * 5 + [_F, _F] + [_I] * 3 + [_P],
}


@cache
def _lib() -> ctypes.CDLL:
    lib = build.load("gemv_stream.cu")
    for name, argtypes in SIGNATURES.items():
        ffi.bind(lib, name, argtypes)
    return lib


def supports_ring(rows: int, n: int, k: int, elt: int, rows_per_item: int, sms: int, optin: int) -> bool:
    """plan() in gemv_stream.cu: a warp's ring holds at least 2 items (1 where it takes only one) within RING_BYTES
    and what a block may opt in to, after the staged x."""
    blocks = min(-(-n // WARPS), sms)
    per_warp = -(-n // (blocks * WARPS))
    x_region = -(-(rows * k * elt) // X_ALIGN) * X_ALIGN
    slot_bytes = WARPS * rows_per_item * k * elt
    budget = min(RING_BYTES, optin - STATIC_RESERVE - x_region)
    return min(MAX_SLOTS, per_warp, budget // slot_bytes) >= min(2, per_warp)


def supports(rows: int, weight: torch.Tensor, *rows_of: torch.Tensor, glu: bool = False) -> bool:
    """Where the streamed GEMV applies on W's device: the prologue GEMVs' needs (supports_prologue), GLU's pair rule
    (supports_glu), and a ring of at least 2 items per warp in the shared memory the device lets a block opt in to. The
    sm_90 it needs is the table's to check (the arm declares it, CAPABILITY); the launcher refuses older devices."""
    if not weight.is_cuda:
        return False
    dev = device.probe_of(weight)
    n, k = weight.shape
    if not cuda_gemv.supports_prologue(rows, k, weight, *rows_of):
        return False
    if glu and not cuda_gemv.supports_glu(rows, weight, *rows_of):
        return False
    items = n // 2 if glu else n
    return supports_ring(rows, items, k, weight.element_size(), 2 if glu else 1, dev.sms, dev.smem_optin)


def linear(
    x: torch.Tensor,  # x: [..., in_features], 1 to MAX_ROWS rows
    weight: torch.Tensor,  # weight: [out_features, in_features] (GLU: [2 * inter, in_features]), x.dtype, row-major
    bias: torch.Tensor | None = None,  # bias: [weight's rows], x.dtype
    pdl: bool = False,  # launch as a programmatic dependent (its first W copies before it waits for x)
    glu: bool = False,  # y = silu_and_mul(product): [..., inter]
) -> torch.Tensor:  # [..., out_features or inter], x.dtype
    """`linear(x, weight, bias)` (with `glu`, `silu_and_mul` of it) with W streamed through shared memory; the bits
    of gemv.linear (gemv.linear_silu_mul). `launch_linear` after the checks that name the bad tensor."""
    if x.dim() < 1:
        raise ValueError("x: expected at least 1 dim, got a scalar")
    if not x.is_cuda:
        raise ValueError(f"x: expected a CUDA tensor, got device {x.device}")
    k = x.shape[-1]
    n = cuda_gemv._check_weight(weight, x, k, bias)
    x2 = cuda_gemv._rows(x, "x", k)
    m = x2.shape[0]
    if not supports(m, weight, x2, glu=glu):
        raise ValueError(f"weight: {n} x {k} with {m} rows of x is not a shape the streamed GEMV takes (sm_90)")
    return launch_linear(x, weight, bias, pdl=pdl, glu=glu)


def launch_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, pdl: bool = False, glu: bool = False
) -> torch.Tensor:
    """The streamed GEMV's launch, its inputs already checked (by `linear`, or by the table's check and the arm's
    `supports`, which holds `supports` here and every tensor on x's device)."""
    n, k = weight.shape
    x2, ldx = cuda_norm.rows(x)
    m = x2.shape[0]
    n_out = n // 2 if glu else n
    y = torch.empty(m, n_out, dtype=x.dtype, device=x.device)
    lib = _lib()
    rc = lib.vt_gemv_stream_gemv(
        *ffi.ptrs(y, weight, x2, bias),
        m,
        n_out,
        k,
        weight.stride(0) if n > 1 else k,
        ldx,
        n_out,
        ffi.dtype_code(x, "x"),
        int(glu),
        int(pdl),
        ffi.stream(x.device),
    )
    ffi.check(rc, "vt_gemv_stream_gemv", lib, "gemv_stream")
    return y.view(*x.shape[:-1], n_out)


def add_rms_norm_linear(
    x: torch.Tensor,  # x: [..., hidden], the sublayer output
    residual: torch.Tensor | None,  # residual: [..., hidden] or None (the norm of x alone)
    norm_weight: torch.Tensor,  # norm_weight: [hidden], x.dtype
    eps: float,
    weight: torch.Tensor,  # weight: [out_features, hidden] (GLU: [2 * inter, hidden]), x.dtype, row-major
    bias: torch.Tensor | None = None,  # bias: [weight's rows]
    pdl: bool = False,
    glu: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:  # (y [..., out_features or inter], new_residual [..., hidden]), x.dtype
    """gemv.add_rms_norm_linear with W streamed through shared memory; its bits."""
    if x.dim() < 1:
        raise ValueError("x: expected at least 1 dim, got a scalar")
    if not x.is_cuda:  # before the shapes, as `linear` here
        raise ValueError(f"x: expected a CUDA tensor, got device {x.device}")

    def refusal(m: int, k: int, rows: list[torch.Tensor]) -> str | None:
        if supports(m, weight, *rows, glu=glu):
            return None
        return f"weight: {weight.shape[0]} x {k} with {m} rows of x is not a shape the streamed GEMV takes (sm_90)"

    return cuda_gemv.launch_prologue(_LAUNCHER, refusal, x, residual, norm_weight, eps, weight, bias, pdl=pdl, glu=glu)


_LAUNCHER = cuda_gemv.Launcher(_lib, "vt_gemv_stream_add_rms_norm", "gemv_stream")


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
    return cuda_gemv.run_prologue(_LAUNCHER, x, residual, norm_weight, eps, weight, bias, pdl=pdl, glu=glu)
