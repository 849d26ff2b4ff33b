"""Binding for the sampling kernels (sample.cu): two-pass greedy argmax and seeded top-k/top-p sampling."""

from __future__ import annotations

import ctypes
from functools import cache

import torch

from engine.cuda import build, ffi

_P = ctypes.c_void_p
_I = ctypes.c_int
_L = ctypes.c_longlong
SIGNATURES: dict[str, list] = {  # launcher -> argtypes (a test holds them to sample.cu)
    "vt_sample_argmax": [_P, _P, _P, _P, _I, _I, _L, _I, _P],
    "vt_sample_argmax_chunks": [_I],
    "vt_sample_top_k_top_p": [_P, _P, _I, _I, _L, _P, _P, _P, _L, _I, _P],
}


@cache
def _lib() -> ctypes.CDLL:
    lib = build.load("sample.cu")
    for name, argtypes in SIGNATURES.items():
        ffi.bind(lib, name, argtypes)
    return lib


def _seed_bits(seed: int) -> int:
    """The seed's low 64 bits as the signed value the launcher's `long long` takes."""
    bits = seed % (1 << 64)
    return bits - (1 << 64) if bits >= 1 << 63 else bits


def _logits(logits: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Checked [batch, vocab] CUDA logits with a contiguous last dim, and their row stride."""
    if not logits.is_cuda:
        raise ValueError(f"logits: expected a CUDA tensor, got device {logits.device}")
    ffi.require(logits, "logits", dim=2, contiguous=False)
    if logits.shape[1] == 0:
        raise ValueError("logits: vocab dim is empty")
    return _rows(logits)


def _rows(logits: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The logits with a contiguous last dim and walkable rows, and their row stride."""
    batch, vocab = logits.shape
    if logits.stride(1) != 1 or (batch > 1 and logits.stride(0) < vocab):
        logits = logits.contiguous()  # the kernels walk rows by a stride of at least vocab
    return logits, (logits.stride(0) if batch > 1 else vocab)


def greedy_argmax(logits: torch.Tensor) -> torch.Tensor:  # logits: [batch, vocab] -> [batch] int64
    """torch.argmax(logits, -1): lowest index among ties, the first NaN if a row holds one. `launch_greedy_argmax`
    after the checks that name the bad tensor: the entry for a direct call."""
    return launch_greedy_argmax(_logits(logits)[0])


def launch_greedy_argmax(logits: torch.Tensor) -> torch.Tensor:
    """The argmax launch, its inputs already checked (by `greedy_argmax`, or by the table's check: [batch, vocab]
    float logits with a vocabulary, on the CUDA device the table runs arms on; any layout)."""
    logits, ld = _rows(logits)
    batch, vocab = logits.shape
    lib = _lib()
    chunks = int(lib.vt_sample_argmax_chunks(vocab))
    part_val = torch.empty(batch, chunks, dtype=torch.float32, device=logits.device)
    part_idx = torch.empty(batch, chunks, dtype=torch.int32, device=logits.device)
    out = torch.empty(batch, dtype=torch.int64, device=logits.device)
    rc = lib.vt_sample_argmax(
        *ffi.ptrs(out, part_val, part_idx, logits),
        batch,
        vocab,
        ld,
        ffi.dtype_code(logits, "logits"),
        ffi.stream(logits.device),
    )
    ffi.check(rc, "vt_sample_argmax", lib, "sample")
    return out


def _per_row(
    value: int | float | torch.Tensor, name: str, batch: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """A scalar or a [batch] tensor as a contiguous [batch] tensor of `dtype` on `device`."""
    if isinstance(value, torch.Tensor):
        if value.dim() != 1 or value.shape[0] != batch:
            raise ValueError(f"{name}: expected shape ({batch},), got {tuple(value.shape)}")
        return value.to(device=device, dtype=dtype).contiguous()
    return torch.full((batch,), value, dtype=dtype, device=device)


def sample_top_k_top_p(
    logits: torch.Tensor,  # logits: [batch, vocab]
    top_k: int | torch.Tensor,  # int or [batch]; <= 0 or >= vocab keeps every token
    top_p: float | torch.Tensor,  # float or [batch] in (0, 1]; 1 keeps every token
    temperature: float | torch.Tensor,  # float or [batch], > 0
    seed: int,
) -> torch.Tensor:  # [batch] int64
    """One token per row from softmax(logits / T) restricted to the top-k, then the top-p nucleus (ties kept).

    The draw is a function of (seed, row, token index) only: the same seed gives the same tokens on any
    launch. Its random stream is not torch's, so it matches the reference in distribution, not bitwise.
    """
    logits, ld = _logits(logits)
    batch, vocab = logits.shape
    dev = logits.device
    k = _per_row(top_k, "top_k", batch, torch.int32, dev)
    p = _per_row(top_p, "top_p", batch, torch.float32, dev)
    t = _per_row(temperature, "temperature", batch, torch.float32, dev)
    if batch and bool((t <= 0).any()):
        raise ValueError("temperature: must be > 0 (use greedy_argmax for temperature 0)")
    if batch and bool(((p <= 0) | (p > 1)).any()):
        raise ValueError("top_p: must be in (0, 1]")
    out = torch.empty(batch, dtype=torch.int64, device=dev)
    lib = _lib()
    rc = lib.vt_sample_top_k_top_p(
        *ffi.ptrs(out, logits),
        batch,
        vocab,
        ld,
        *ffi.ptrs(k, p, t),
        _seed_bits(seed),
        ffi.dtype_code(logits, "logits"),
        ffi.stream(dev),
    )
    ffi.check(rc, "vt_sample_top_k_top_p", lib, "sample")
    return out
