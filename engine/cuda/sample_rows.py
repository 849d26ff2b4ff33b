"""Binding for the serving sampler's fused draw (sample_rows.cu): Gumbel-max over the unfiltered rows in one
pass over the logits, the reference's counter-based noise recomputed in registers instead of [batch, vocab]
int64 temporaries; per-row temperature, seed and step are device tensors, so a captured step can run it."""

from __future__ import annotations

import ctypes
from functools import cache

import torch

from engine.cuda import build, ffi

_P, _I, _L = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong


@cache
def _lib() -> ctypes.CDLL:
    lib = build.load("sample_rows.cu")
    ffi.bind(lib, "vt_sample_rows_gumbel", [_P, _P, _I, _I, _L, _P, _P, _P, _I, _P])
    return lib


def sample_rows(
    logits: torch.Tensor,  # logits: [batch, vocab], unit stride along the vocabulary
    temperature: torch.Tensor,  # temperature: [batch] float32 (0: the row's draw is unused)
    top_k: torch.Tensor,  # top_k: [batch], unused (unfiltered rows only)
    top_p: torch.Tensor,  # top_p: [batch], unused
    seeds: torch.Tensor,  # seeds: [batch] int64
    steps: torch.Tensor,  # steps: [batch] int64
    filtered: bool = True,
) -> torch.Tensor:  # [batch] int64
    if filtered:
        raise ValueError("sample_rows kernel: draws unfiltered rows only (filtered=False)")
    dev = logits.device
    ffi.require(logits, "logits", dim=2, device=dev, contiguous=False)
    if logits.stride(1) != 1:
        raise ValueError(f"logits: the vocabulary must have unit stride (strides {logits.stride()})")
    batch, vocab = logits.shape
    t = temperature.to(torch.float32).contiguous()
    s, n = seeds.to(torch.int64).contiguous(), steps.to(torch.int64).contiguous()
    for name, x in (("temperature", t), ("seeds", s), ("steps", n)):
        ffi.require(x, name, dim=1, device=dev)
        if x.shape[0] != batch:
            raise ValueError(f"{name}: {x.shape[0]} rows != logits' batch {batch}")
    return launch_sample_rows(logits, temperature, top_k, top_p, seeds, steps, filtered)


def supports(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    seeds: torch.Tensor,
    steps: torch.Tensor,
    filtered: bool = True,
) -> bool:
    """What the Gumbel-max kernel needs past the op's check (engine/ops/sample.py: ranks, dtypes, one row each):
    unfiltered rows, a unit-stride vocabulary, and the per-row tensors it reads on the logits' device. The table's arm
    asks this, then launches unchecked (`launch_sample_rows`)."""
    same = all(t.device == logits.device for t in (temperature, seeds, steps))
    return not filtered and logits.stride(-1) == 1 and same


def launch_sample_rows(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    seeds: torch.Tensor,
    steps: torch.Tensor,
    filtered: bool = False,
) -> torch.Tensor:
    """The draw's launch, its inputs already checked (by `sample_rows`, or by the table's check and `supports`)."""
    dev = logits.device
    batch, vocab = logits.shape
    t = temperature.to(torch.float32).contiguous()
    s, n = seeds.to(torch.int64).contiguous(), steps.to(torch.int64).contiguous()
    out = torch.empty(batch, dtype=torch.int64, device=dev)
    lib = _lib()
    rc = lib.vt_sample_rows_gumbel(
        *ffi.ptrs(out, logits),
        batch,
        vocab,
        logits.stride(0),
        *ffi.ptrs(t, s, n),
        ffi.dtype_code(logits, "logits"),
        ffi.stream(dev),
    )
    ffi.check(rc, "vt_sample_rows_gumbel", lib, "sample_rows")
    return out
