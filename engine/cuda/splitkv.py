"""Binding for split-KV decode attention with the GQA group swap (splitkv.cu): split count, fp32 partials, log-sum-exp
combine. The kernel table's by-name `splitkv_swap` arm (engine/kernels/attention.py)."""

from __future__ import annotations

import ctypes
from functools import cache

import torch

from engine.cuda import build, ffi, paged_attn
from engine.cuda import device as cuda_device
from engine.cuda.paged_attn_tiled import Shape

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
    """`launch_partial` after the checks that name the bad argument: the entry for a direct call."""
    _check(q, k_cache, v_cache, block_tables, context_lens)
    return launch_partial(q, k_cache, v_cache, block_tables, context_lens, scale, splits, sliding_window)


def launch_partial(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    splits: int,
    sliding_window: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The partial pass (arguments as `partial`'s), its inputs already checked. The tables and lengths go to the
    kernel as int32 (a no-op when they are)."""
    tables, lens = block_tables.to(torch.int32).contiguous(), context_lens.to(torch.int32).contiguous()
    shape = Shape.of(q, k_cache, tables)
    o_part = torch.empty(shape.batch, splits, shape.hq, shape.d, dtype=torch.float32, device=q.device)
    lse = torch.empty(shape.batch, splits, shape.hq, dtype=torch.float32, device=q.device)
    lib = _lib()
    rc = lib.vt_splitkv_partial(
        *ffi.ptrs(o_part, lse, q, k_cache, v_cache, tables, lens),
        *shape.args(scale, sliding_window),
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
    """`launch_combine` after the checks that name the bad argument: the entry for a direct call."""
    ffi.require(o_part, "o_part", dim=4, dtype=torch.float32)
    ffi.require(lse, "lse", dim=3, dtype=torch.float32, device=o_part.device)
    if tuple(lse.shape) != tuple(o_part.shape[:3]):
        raise ValueError(f"lse: shape {tuple(lse.shape)} != o_part's leading {tuple(o_part.shape[:3])}")
    return launch_combine(o_part, lse, dtype)


def launch_combine(o_part: torch.Tensor, lse: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The combine launch (arguments as `combine`'s), its inputs already checked (by `combine`, or made by
    `launch_partial`)."""
    batch, splits, hq, d = o_part.shape
    out = torch.empty(batch, hq, d, dtype=dtype, device=o_part.device)
    lib = _lib()
    rc = lib.vt_splitkv_combine(
        *ffi.ptrs(out, o_part, lse),
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
    """Split-KV decode end to end: `launch_decode` after the checks that name the bad argument (the entry for a
    direct call)."""
    longest = capacity(block_tables, k_cache) if max_context is None else max_context
    if longest < 1:
        raise ValueError(
            f"max_context: expected >= 1, got {longest} (block_tables {tuple(block_tables.shape)}, "
            f"k_cache {tuple(k_cache.shape)})"
        )
    _check(q, k_cache, v_cache, block_tables, context_lens)
    return launch_decode(q, k_cache, v_cache, block_tables, context_lens, scale, sliding_window, longest)


def supports_inputs(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
) -> bool:
    """What the group-swap kernel needs past the op's check and `supports`: `paged_attn.supports_inputs` (q and the
    caches contiguous, every tensor on q's device) and a block table that addresses at least one token."""
    dense = paged_attn.supports_inputs(q, k_cache, v_cache, block_tables, context_lens)
    return dense and block_tables.shape[1] * k_cache.shape[1] >= 1


def launch_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    max_context: int | None = None,
) -> torch.Tensor:  # [batch, Hq, D], q.dtype
    """Split-KV decode (arguments as `decode`'s), its inputs already checked (by `decode`, or by the table's check,
    `supports` and `supports_inputs`). The split count is sized from max_context, by default the tables' static
    capacity (`capacity`): shapes only, never a host read of context_lens, so the call can be captured in a CUDA
    graph and every replay keeps the split count it was captured with."""
    rows = q.shape[0] * k_cache.shape[2]  # one block per (sequence, KV head): the group swap
    longest = capacity(block_tables, k_cache) if max_context is None else max_context
    splits = num_splits(rows, longest, sm_count(q.device))
    o_part, lse = launch_partial(q, k_cache, v_cache, block_tables, context_lens, scale, splits, sliding_window)
    return launch_combine(o_part, lse, q.dtype)


def _check(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
) -> None:
    """The paged decode bindings' checks (`paged_attn.check_inputs`), and the dtypes split-KV takes."""
    paged_attn.check_inputs(q, k_cache, v_cache, block_tables, context_lens)
    if q.dtype not in (torch.float32, torch.bfloat16):
        raise TypeError(f"q: split-KV takes fp32 or bf16, got {q.dtype}")


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
