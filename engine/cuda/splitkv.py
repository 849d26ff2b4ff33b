"""Binding for split-KV decode attention with the GQA group swap (splitkv.cu): split count, fp32 partials, log-sum-exp
combine. The kernel table's by-name `splitkv_swap` arm (engine/kernels/attention.py)."""

from __future__ import annotations

import ctypes
from functools import cache

import torch

from engine.cuda import build, ffi
from engine.cuda import device as cuda_device
from engine.cuda.paged_attn import check_inputs

_P, _I, _F = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
HEAD_DIMS = (64, 128, 256)  # the launcher's instantiations
SWAP_GROUPS = (1, 2, 4, 8)  # query heads per KV head the group swap packs as rows
DTYPES = (torch.float32, torch.bfloat16)


def supports(head_dim: int, group: int, dtype: torch.dtype) -> bool:
    """Shapes and dtypes the group-swap kernel is compiled for (the kernel table's by-name `splitkv_swap` arm)."""
    return head_dim in HEAD_DIMS and group in SWAP_GROUPS and dtype in DTYPES


@cache
def _lib() -> ctypes.CDLL:
    lib = build.load("splitkv.cu")
    ffi.bind(lib, "vt_splitkv_num_splits", [_I, _I, _I])
    ffi.bind(lib, "vt_splitkv_partial", [_P, _P, _P, _P, _P, _P, _P, _I, _I, _I, _I, _I, _I, _F, _I, _I, _I, _P])
    ffi.bind(lib, "vt_splitkv_combine", [_P, _P, _P, _I, _I, _I, _I, _I, _P])
    return lib


def num_splits(rows: int, max_context: int, sm_count: int) -> int:
    """The launcher's heuristic: min(ceil(2*SMs / rows), ceil(max_context / 256)) clamped to [1, 64]."""
    return _lib().vt_splitkv_num_splits(rows, max_context, sm_count)


def partial(
    q: torch.Tensor,  # q: [batch, Hq, D]
    k_cache: torch.Tensor,  # k_cache: [num_blocks, block_size, Hkv, D]
    v_cache: torch.Tensor,  # v_cache: [num_blocks, block_size, Hkv, D]
    block_tables: torch.Tensor,  # block_tables: [batch, max_blocks] int32
    context_lens: torch.Tensor,  # context_lens: [batch] int32
    scale: float,
    splits: int,
    sliding_window: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:  # (out [batch, splits, Hq, D] fp32, lse [batch, splits, Hq] fp32)
    tables, lens = check_inputs(q, k_cache, v_cache, block_tables, context_lens)
    if q.dtype not in (torch.float32, torch.bfloat16):
        raise TypeError(f"q: split-KV takes fp32 or bf16, got {q.dtype}")
    batch, hq, d = q.shape
    o_part = torch.empty(batch, splits, hq, d, dtype=torch.float32, device=q.device)
    lse = torch.empty(batch, splits, hq, dtype=torch.float32, device=q.device)
    lib = _lib()
    rc = lib.vt_splitkv_partial(
        ffi.ptr(o_part),
        ffi.ptr(lse),
        ffi.ptr(q),
        ffi.ptr(k_cache),
        ffi.ptr(v_cache),
        ffi.ptr(tables),
        ffi.ptr(lens),
        batch,
        hq,
        k_cache.shape[2],
        d,
        k_cache.shape[1],
        tables.shape[1],
        scale,
        sliding_window or 0,
        splits,
        ffi.dtype_code(q, "q"),
        ffi.stream(q.device),
    )
    ffi.check(rc, "vt_splitkv_partial", lib, "splitkv")
    return o_part, lse


def combine(
    o_part: torch.Tensor,  # o_part: [batch, splits, Hq, D] fp32
    lse: torch.Tensor,  # lse: [batch, splits, Hq] fp32
    dtype: torch.dtype,
) -> torch.Tensor:  # [batch, Hq, D], dtype
    ffi.require(o_part, "o_part", dim=4, dtype=torch.float32)
    ffi.require(lse, "lse", dim=3, dtype=torch.float32, device=o_part.device)
    if tuple(lse.shape) != tuple(o_part.shape[:3]):
        raise ValueError(f"lse: shape {tuple(lse.shape)} != o_part's leading {tuple(o_part.shape[:3])}")
    batch, splits, hq, d = o_part.shape
    out = torch.empty(batch, hq, d, dtype=dtype, device=o_part.device)
    lib = _lib()
    rc = lib.vt_splitkv_combine(
        ffi.ptr(out),
        ffi.ptr(o_part),
        ffi.ptr(lse),
        batch,
        hq,
        d,
        splits,
        ffi.dtype_code(out, "out"),
        ffi.stream(o_part.device),
    )
    ffi.check(rc, "vt_splitkv_combine", lib, "splitkv")
    return out


def decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    max_context: int | None = None,
) -> torch.Tensor:  # [batch, Hq, D], q.dtype
    """Split-KV decode end to end. The split count is sized from max_context, by default the tables'
    static capacity (`capacity`): shapes only, never a host read of context_lens, so the call can be
    captured in a CUDA graph and every replay keeps the split count it was captured with."""
    rows = q.shape[0] * k_cache.shape[2]  # one block per (sequence, KV head): the group swap
    longest = capacity(block_tables, k_cache) if max_context is None else max_context
    if longest < 1:
        raise ValueError(
            f"max_context: expected >= 1, got {longest} (block_tables {tuple(block_tables.shape)}, "
            f"k_cache {tuple(k_cache.shape)})"
        )
    o_part, lse = partial(
        q,
        k_cache,
        v_cache,
        block_tables,
        context_lens,
        scale,
        num_splits(rows, longest, sm_count(q.device)),
        sliding_window,
    )
    return combine(o_part, lse, q.dtype)


def capacity(
    block_tables: torch.Tensor,  # block_tables: [batch, max_blocks] int32
    k_cache: torch.Tensor,  # k_cache: [num_blocks, block_size, Hkv, D]
) -> int:
    """The longest context the tables can address: max blocks per sequence times the block size."""
    if block_tables.dim() != 2 or k_cache.dim() != 4:
        raise ValueError(
            f"block_tables {tuple(block_tables.shape)} / k_cache {tuple(k_cache.shape)}: "
            "expected [batch, max_blocks] and [num_blocks, block_size, Hkv, D]"
        )
    return block_tables.shape[1] * k_cache.shape[1]


def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of `device` (the cached device probe: no stream work, capturable)."""
    return cuda_device.probe(device.index if device.index is not None else torch.cuda.current_device()).sms
