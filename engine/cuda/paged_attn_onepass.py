"""Binding for the one-pass paged decode attention (paged_attn_onepass.cu, the kernel table's `tiled_onepass` arm
under VT_ATTN_ONEPASS): K and V of each 64-token tile through one cp.async pipeline, an online softmax in fp32
(probabilities rounded only as the P.V MMA's operand), and with several splits the last split combines them, so a
call is one launch. Split-KV is sized from the block tables' capacity, so no context length is read on the host.

Its rounding is not the eager reference's: it is held to the fp32 reference (`engine.ops.splitkv` with one split)
in the numerics cases and to the near-tie razor's fp32-probabilities setting in the token gates."""

from __future__ import annotations

import ctypes
from functools import cache

import torch

from engine.cuda import build, ffi
from engine.cuda import paged_attn_tiled as tiled

_P, _I, _F = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
HEAD_DIMS = (64, 128)  # at 256 the K+V stages leave one block per SM: the two-pass arms are faster there
MAX_GROUP = tiled.MAX_GROUP
DTYPES = tiled.DTYPES
MAX_SPLITS = 64  # kMaxSplits (paged_attn_tiled.cuh)


@cache
def _lib() -> ctypes.CDLL:
    lib = build.load("paged_attn_onepass.cu")
    ffi.bind(lib, "vt_paged_attn_onepass_num_splits", [ctypes.POINTER(_I), _I, _I, _I, _I])
    ffi.bind(
        lib,
        "vt_paged_attn_onepass_decode",
        [_P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _I, _I, _I, _I, _I, _I, _F, _I, _I, _I, _P],
    )
    return lib


def supports(head_dim: int, group: int, dtype: torch.dtype) -> bool:
    """The shapes and dtypes the kernel is compiled for: the tiled kernels' (`DTYPES`, `MAX_GROUP`), at `HEAD_DIMS`."""
    return head_dim in HEAD_DIMS and tiled.supports(head_dim, group, dtype)


@cache
def num_splits(rows: int, max_context: int, head_dim: int, dtype: torch.dtype, device_index: int) -> int:
    """The split count the kernel's cost rule picks for `rows` = batch x KV heads blocks on this device."""
    args = (rows, max_context, head_dim, ffi.DTYPE_CODES[dtype])
    return ffi.query(_lib(), "vt_paged_attn_onepass_num_splits", "paged_attn_onepass", device_index, *args)


def _splits(shape: tiled.Shape) -> int:
    return num_splits(
        shape.batch * shape.hkv, shape.max_blocks * shape.block_size, shape.d, shape.dtype, shape.device_index
    )


def supports_inputs(q: torch.Tensor, k_cache: torch.Tensor, block_tables: torch.Tensor) -> bool:
    """Whether the kernel takes this decode: its shapes, and with several splits ready arrival counters (not first
    made under graph capture); no host read of the lengths."""
    shape = tiled.Shape.of(q, k_cache, block_tables)
    if not supports(shape.d, shape.hq // shape.hkv, q.dtype):
        return False
    return _splits(shape) == 1 or tiled.arrival_counters(q.device, 2 * shape.batch * shape.hkv) is not None


def decode(
    q: torch.Tensor,  # q: [batch, Hq, D] contiguous, bf16 or fp16
    k_cache: torch.Tensor,  # k_cache: [num_blocks, block_size, Hkv, D] contiguous
    v_cache: torch.Tensor,  # v_cache: [num_blocks, block_size, Hkv, D] contiguous
    block_tables: torch.Tensor,  # block_tables: [batch, max_blocks] int32
    context_lens: torch.Tensor,  # context_lens: [batch] int32, each in [1, max_blocks * block_size]
    scale: float,
    sliding_window: int | None = None,
    splits: int | None = None,  # None: the kernel's cost rule over the tables' capacity
) -> torch.Tensor:  # [batch, Hq, D], q.dtype
    """`launch_decode` after the checks that name the bad argument: the entry for a direct call."""
    shape = tiled.check_inputs(q, k_cache, v_cache, block_tables, context_lens, sliding_window)[2]
    if not supports(shape.d, shape.hq // shape.hkv, q.dtype):
        raise ValueError(f"q: the one-pass arm takes head_dim in {HEAD_DIMS}; got head_dim {shape.d}")
    if splits is not None and not 1 <= splits <= MAX_SPLITS:
        raise ValueError(f"splits: expected 1..{MAX_SPLITS}, got {splits}")
    return launch_decode(q, k_cache, v_cache, block_tables, context_lens, scale, sliding_window, splits)


def launch_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    splits: int | None = None,
) -> torch.Tensor:  # [batch, Hq, D], q.dtype
    """The one-pass launch (arguments as `decode`'s), its inputs already checked (by `decode`, or by the table's
    check, `paged_attn.supports_inputs` and `supports_inputs`). The tables and lengths go to the kernel as int32 (a
    no-op when they are: the staged step's are)."""
    tables, lens = block_tables.to(torch.int32).contiguous(), context_lens.to(torch.int32).contiguous()
    shape = tiled.Shape.of(q, k_cache, tables)
    if splits is None:
        splits = _splits(shape)
    out = torch.empty_like(q)
    parts: list[torch.Tensor | None] = [None, None, None, None]
    if splits > 1:
        counters = tiled.arrival_counters(q.device, 2 * shape.batch * shape.hkv)
        if counters is None:
            raise ValueError(
                f"one-pass arm: {splits} splits need the arrival counters, which are not made under graph capture"
                f" or cannot hold {shape.batch} x {shape.hkv} (sequence, KV head) pairs; call `supports_inputs` first"
            )
        parts = [*shape.partials(splits, q.device), counters]
    lib = _lib()
    rc = lib.vt_paged_attn_onepass_decode(
        *ffi.ptrs(out, *parts, q, k_cache, v_cache, tables, lens),
        *shape.args(scale, sliding_window),
        splits,
        ffi.dtype_code(q, "q"),
        ffi.stream(q.device),
    )
    ffi.check(rc, "vt_paged_attn_onepass_decode", lib, "paged_attn_onepass")
    return out
