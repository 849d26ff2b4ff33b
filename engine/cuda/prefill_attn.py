"""Binding for varlen prefill/extend attention (prefill_attn.cu): one launch for every sequence of a step.

Each sequence's new tokens attend causally to themselves and to its cached prefix, read through its block
table (`extend`), or, for whole prompts, to the new tokens' own contiguous K/V (`prefill`). The lengths are
int32 device tensors and the launch reads none of them on the host, so a step that uploads them once calls
this for every layer without a host sync. Two tensor-core passes round the scores and probabilities where
the eager reference does (engine/ops/paged_attn.py)."""

from __future__ import annotations

import ctypes
from functools import cache

import torch

from engine.cuda import build, ffi

_P, _I, _F, _LL = ctypes.c_void_p, ctypes.c_int, ctypes.c_float, ctypes.c_longlong
HEAD_DIMS = (32, 64, 128, 256)
DTYPES = (torch.bfloat16, torch.float16)


@cache
def _lib() -> ctypes.CDLL:
    lib = build.load("prefill_attn.cu")
    ffi.bind(
        lib,
        "vt_prefill_attn",
        [_P, _P, _P, _P, _P, _P, _P, _I, _LL, _I, _I, _I, _I, _I, _I, _F, _I, _I, _P],
    )
    return lib


def supports(head_dim: int, dtype: torch.dtype) -> bool:
    """The head dims and dtypes the kernel is compiled for (any GQA group, any window)."""
    return head_dim in HEAD_DIMS and dtype in DTYPES


def extend(
    q: torch.Tensor,  # q: [tokens, Hq, D], each sequence's new tokens packed back to back; rows may be strided
    k_cache: torch.Tensor,  # k_cache: [num_blocks, block_size, Hkv, D] contiguous, the new tokens' K/V stored
    v_cache: torch.Tensor,  # v_cache: [num_blocks, block_size, Hkv, D] contiguous
    block_tables: torch.Tensor,  # block_tables: [num_seqs, max_blocks] int32
    lens: torch.Tensor,  # lens: [2, num_seqs] int32: new tokens, then cached prefix tokens, per sequence
    scale: float,
    sliding_window: int | None = None,
) -> torch.Tensor:  # [tokens, Hq, D], q.dtype
    _check_q(q)
    dev = q.device
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        ffi.require(t, name, dim=4, dtype=q.dtype, device=dev)
    if v_cache.shape != k_cache.shape or k_cache.shape[3] != q.shape[2] or q.shape[1] % k_cache.shape[2]:
        raise ValueError(
            f"k_cache/v_cache: shapes {tuple(k_cache.shape)}/{tuple(v_cache.shape)} do not fit q {tuple(q.shape)}"
        )
    ffi.require(block_tables, "block_tables", dim=2, dtype=torch.int32, device=dev)
    _check_lens(lens, block_tables.shape[0], dev)
    ffi.require_window(sliding_window)
    return launch_extend(q, k_cache, v_cache, block_tables, lens, scale, sliding_window)


def launch_extend(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
) -> torch.Tensor:  # [tokens, Hq, D], q.dtype
    """The extend launch (arguments as `extend`'s), its inputs already checked (by `extend`, or by the table's
    check and `supports_extend`)."""
    return _launch(
        q,
        k_cache,
        v_cache,
        block_tables,
        lens[0],
        lens[1],
        k_cache.shape[1],
        block_tables.shape[1],
        scale,
        sliding_window,
    )


def prefill(
    q: torch.Tensor,  # q: [tokens, Hq, D]
    k: torch.Tensor,  # k: [tokens, Hkv, D] contiguous
    v: torch.Tensor,  # v: [tokens, Hkv, D] contiguous
    lens: torch.Tensor,  # lens: [1 or 2, num_seqs] int32: row 0 the prompt lengths (row 1, if any, is ignored)
    scale: float,
    sliding_window: int | None = None,
) -> torch.Tensor:  # [tokens, Hq, D], q.dtype
    _check_q(q)
    for name, t in (("k", k), ("v", v)):
        ffi.require(t, name, dim=3, dtype=q.dtype, device=q.device)
    if v.shape != k.shape or k.shape[0] != q.shape[0] or k.shape[2] != q.shape[2] or q.shape[1] % k.shape[1]:
        raise ValueError(f"k/v: shapes {tuple(k.shape)}/{tuple(v.shape)} do not fit q {tuple(q.shape)}")
    _check_lens(lens, lens.shape[-1], q.device, rows=(1, 2))
    ffi.require_window(sliding_window)
    return launch_prefill(q, k, v, lens, scale, sliding_window)


def launch_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
) -> torch.Tensor:  # [tokens, Hq, D], q.dtype
    """The prefill launch (arguments as `prefill`'s), its inputs already checked (by `prefill`, or by the table's
    check and `supports_prefill`)."""
    return _launch(q, k, v, None, lens[0], None, 0, 0, scale, sliding_window)


def supports_prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lens: torch.Tensor | None) -> bool:
    """What the kernel needs past the op's check (engine/ops/paged_attn.py: ranks, dtypes, sizes, groups, the window,
    the device lengths' shape and device) and `supports`: each token's heads of q contiguous, K and V on q's
    device (the table's adapter hands them over contiguous), device lengths with a unit stride."""
    dev = q.device
    return _heads_packed(q) and k.device == dev and v.device == dev and (lens is None or lens.stride(1) == 1)


def supports_extend(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor, lens: torch.Tensor | None
) -> bool:
    """`supports_prefill`'s q and lengths, and contiguous caches of q's dtype and a contiguous block table, all on
    q's device (the table's adapter hands the tables over as int32)."""
    dev = q.device
    caches = all(t.device == dev and t.is_contiguous() for t in (k_cache, v_cache)) and v_cache.dtype == q.dtype
    tables = block_tables.device == dev and block_tables.is_contiguous()
    return caches and tables and _heads_packed(q) and (lens is None or lens.stride(1) == 1)


def _heads_packed(q: torch.Tensor) -> bool:
    return q.stride(2) == 1 and q.stride(1) == q.shape[2]


def _launch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_tables: torch.Tensor | None,
    seq_lens: torch.Tensor,
    prefix_lens: torch.Tensor | None,
    block_size: int,
    max_blocks: int,
    scale: float,
    sliding_window: int | None,
) -> torch.Tensor:
    tokens, hq, d = q.shape
    hkv = k.shape[-2]
    out = torch.empty(tokens, hq, d, dtype=q.dtype, device=q.device)
    lib = _lib()
    rc = lib.vt_prefill_attn(
        *ffi.ptrs(out, q, k, v, block_tables, seq_lens, prefix_lens),
        tokens,
        q.stride(0),
        seq_lens.shape[0],
        hq,
        hkv,
        d,
        block_size,
        max_blocks,
        scale,
        sliding_window or 0,
        ffi.dtype_code(q, "q"),
        ffi.stream(q.device),
    )
    ffi.check(rc, "vt_prefill_attn", lib, "prefill_attn")
    return out


def _check_q(q: torch.Tensor) -> None:
    ffi.require(q, "q", dim=3, contiguous=False)
    if not supports(q.shape[2], q.dtype):
        raise ValueError(
            f"q: the prefill kernel takes head_dim in {HEAD_DIMS}, bf16 or fp16; got {tuple(q.shape)} {q.dtype}"
        )
    if not _heads_packed(q):
        raise ValueError(f"q: each token's heads must be contiguous (strides {q.stride()})")


def _check_lens(lens: torch.Tensor, seqs: int, dev: torch.device, rows: tuple[int, ...] = (2,)) -> None:
    ffi.require(lens, "lens", dim=2, dtype=torch.int32, device=dev, contiguous=False)
    if lens.shape[0] not in rows or lens.shape[1] != seqs or lens.stride(1) != 1:
        raise ValueError(
            f"lens: expected [{'/'.join(map(str, rows))}, {seqs}] with unit stride, got {tuple(lens.shape)}"
        )
