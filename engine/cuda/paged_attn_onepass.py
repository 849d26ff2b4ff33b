"""Binding for the one-pass paged decode attention (paged_attn_onepass.cu, the kernel table's `tiled_onepass` arm
under VT_ATTN_ONEPASS): K and V of each 64-token tile through one cp.async pipeline, an online softmax in fp32
(probabilities rounded only as the P.V MMA's operand), and with several splits the last split combines them, so a
call is one launch. Split-KV is sized from the block tables' capacity, so no context length is read on the host.

At head_dim 256 K and V take separate pipeline stages (Q sits in shared memory), so that two blocks fit per SM on
an H200; the arm takes head_dim 256 only on a device whose shared memory holds two of those blocks (`fits`): with
one block per SM the two-pass arms are faster.

Its rounding is not the eager reference's: it is held to the fp32 reference (`engine.ops.splitkv` with one split)
in the numerics cases and to the near-tie razor's fp32-probabilities setting in the token gates."""

from __future__ import annotations

import ctypes
from functools import cache

import torch

from engine.cuda import build, ffi, split_table
from engine.cuda import paged_attn_tiled as tiled
from engine.cuda.device import Device

_P, _I, _F = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
HEAD_DIMS = (64, 128, 256)
MAX_GROUP = tiled.MAX_GROUP
DTYPES = tiled.DTYPES
MAX_SPLITS = 64  # kMaxSplits (paged_attn_tiled.cuh)
# The stage arithmetic of paged_attn_onepass.cuh (`smem_bytes`), for the predicate without a device; a test holds it
# to the compiled `vt_paged_attn_onepass_smem_bytes`. A K or V row is head_dim elements of 2 bytes (unpadded, its
# 16-byte chunks swizzled), a Q row head_dim + 8; a tile 64 rows.
_TILE, _ROW_PAD, _STAGES, _WARPS = 64, 8, 3, 4
TWICE_HEAD_DIMS = (256,)  # the head dims the arm takes only where two blocks fit per SM
# Shared memory each resident block costs past its own: the driver's reservation (1 KB on sm_80 and later,
# cudaDevAttrReservedSharedMemoryPerBlock) and the kernel's static 128 bytes (ptxas -v: its 16, padded to the dynamic
# array's 128-byte alignment).
RESERVED_PER_BLOCK = 1024
STATIC_SMEM = 128


def smem_bytes(head_dim: int) -> int:
    """The dynamic shared memory of one block of the head_dim's kernel (both dtypes are 2 bytes)."""
    kv_row, q_row = 2 * head_dim, 2 * (head_dim + _ROW_PAD)
    if head_dim >= 256:  # K and V in separate stages, Q's (padded) rows after them
        pipe = _STAGES * _TILE * kv_row + MAX_GROUP * q_row
    else:  # a tile's K and V in one stage
        pipe = _STAGES * 2 * _TILE * kv_row
    merge = 4 * _WARPS * MAX_GROUP * (head_dim + 2)
    return max(pipe, merge)


def blocks_fit(head_dim: int, device: Device) -> int:
    """How many blocks of the head_dim's kernel the device's shared memory holds per SM. The probe knows the opt-in
    ceiling per block; an SM holds that plus one reservation on every arch from sm_80 (A100 164 KB, 163 opt-in;
    H100/H200 228 KB, 227; sm_86/89/120 100 KB, 99)."""
    per_block = smem_bytes(head_dim) + STATIC_SMEM + RESERVED_PER_BLOCK
    return 0 if device.missing is not None else (device.smem_optin + RESERVED_PER_BLOCK) // per_block


@cache
def _lib() -> ctypes.CDLL:
    lib = build.load("paged_attn_onepass.cu")
    ffi.bind(lib, "vt_paged_attn_onepass_num_splits", [ctypes.POINTER(_I), _I, _I, _I, _I])
    ffi.bind(lib, "vt_paged_attn_onepass_blocks_per_sm", [ctypes.POINTER(_I), _I, _I])
    ffi.bind(
        lib,
        "vt_paged_attn_onepass_decode",
        [_P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _I, _I, _I, _I, _I, _I, _F, _I, _I, _I, _P],
    )
    return lib


def fits(head_dim: int, device: Device) -> bool:
    """Whether the head_dim's block fits the device as the arm needs: two per SM at head_dim 256 (with one the
    two-pass arms are faster), one at 64 and 128 (an sm_89 part's 99 KB opt-in holds no head_dim-128 block, whose
    launch would fail)."""
    return blocks_fit(head_dim, device) >= (2 if head_dim in TWICE_HEAD_DIMS else 1)


def supports(head_dim: int, group: int, dtype: torch.dtype, device: Device | None = None) -> bool:
    """The shapes and dtypes the kernel is compiled for (the tiled kernels' `DTYPES` and `MAX_GROUP`, at
    `HEAD_DIMS`), and on a `device` (none given: the shapes alone) a block that `fits`."""
    shape_ok = head_dim in HEAD_DIMS and tiled.supports(head_dim, group, dtype)
    return shape_ok and (device is None or fits(head_dim, device))


@cache
def num_splits(rows: int, max_context: int, head_dim: int, dtype: torch.dtype, device_index: int) -> int:
    """The split count the kernel's cost rule picks for `rows` = batch x KV heads blocks on this device."""
    args = (rows, max_context, head_dim, ffi.DTYPE_CODES[dtype])
    return ffi.query(_lib(), "vt_paged_attn_onepass_num_splits", "paged_attn_onepass", device_index, *args)


def blocks_per_sm(head_dim: int, dtype: torch.dtype, device_index: int) -> int:
    """The blocks of the head_dim's kernel resident per SM on this device (the CUDA occupancy calculator's answer,
    after the shared-memory opt-in): what `num_splits` sizes its waves by."""
    args = (head_dim, ffi.DTYPE_CODES[dtype])
    return ffi.query(_lib(), "vt_paged_attn_onepass_blocks_per_sm", "paged_attn_onepass", device_index, *args)


def _splits(shape: tiled.Shape) -> int:
    """`num_splits` over the tables' capacity, or under VT_ATTN_SPLIT_TABLE the measured table's count where it holds
    this shape (engine/cuda/split_table.py)."""
    rows, cap = shape.batch * shape.hkv, shape.max_blocks * shape.block_size
    rule = num_splits(rows, cap, shape.d, shape.dtype, shape.device_index)
    return split_table.pick("onepass", rows, cap, shape.d, shape.dtype, shape.device_index, rule)


def supports_inputs(q: torch.Tensor, k_cache: torch.Tensor, block_tables: torch.Tensor) -> bool:
    """Whether the kernel takes this decode: its shapes, and with several splits ready arrival counters (not first
    made under graph capture); no host read of the lengths. The device's fit (`fits`) is the table's to ask, of its
    view of q's device (engine/kernels/attention.py)."""
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
