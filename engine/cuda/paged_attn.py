"""Binding for paged decode attention (paged_attn.cu): the generic arm and warp-split-KV at head_dim 128.

Which arm runs is the kernel table's choice (engine/kernels/); this module launches the one it is told to."""

from __future__ import annotations

import ctypes
from functools import cache

import torch

from engine.cuda import build, ffi

_P, _I, _F = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
GENERIC, WARP = 0, 1  # the launcher's arm codes
ARMS = {"generic": GENERIC, "warp_d128": WARP}
_FAST_DTYPES = (torch.float32, torch.bfloat16)


@cache
def _lib() -> ctypes.CDLL:
    lib = build.load("paged_attn.cu")
    ffi.bind(lib, "vt_paged_attn_decode", [_P, _P, _P, _P, _P, _P, _P, _I, _I, _I, _I, _I, _I, _F, _I, _I, _I, _P])
    return lib


def supports(arm: int, head_dim: int, group: int, dtype: torch.dtype) -> bool:
    """Shapes and dtypes each arm is compiled for (the generic arm takes every head_dim <= 256, multiple of 8; the
    warp arm head_dim 128, one query head per block whatever the group)."""
    if arm == GENERIC:
        return head_dim <= 256 and head_dim % 8 == 0
    return arm == WARP and dtype in _FAST_DTYPES and head_dim == 128


def check_inputs(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Shape/dtype/device checks naming the tensor; returns block_tables and context_lens as int32."""
    dev = q.device
    ffi.require(q, "q", dim=3, device=dev)
    ffi.dtype_code(q, "q")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        ffi.require(t, name, dim=4, dtype=q.dtype, device=dev)
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"v_cache: shape {tuple(v_cache.shape)} != k_cache's {tuple(k_cache.shape)}")
    if k_cache.shape[3] != q.shape[2] or q.shape[1] % k_cache.shape[2]:
        raise ValueError(
            f"k_cache: shape {tuple(k_cache.shape)} does not fit q {tuple(q.shape)} "
            "(head_dim must match; q heads a multiple of KV heads)"
        )
    tables = block_tables.to(torch.int32).contiguous()
    lens = context_lens.to(torch.int32).contiguous()
    ffi.require(tables, "block_tables", dim=2, device=dev)
    ffi.require(lens, "context_lens", dim=1, device=dev)
    if tables.shape[0] != q.shape[0] or lens.shape[0] != q.shape[0]:
        raise ValueError(
            f"block_tables {tuple(tables.shape)} / context_lens {tuple(lens.shape)}: batch != q's {q.shape[0]}"
        )
    return tables, lens


def paged_decode_attention(
    q: torch.Tensor,  # q: [batch, Hq, D] contiguous
    k_cache: torch.Tensor,  # k_cache: [num_blocks, block_size, Hkv, D] contiguous
    v_cache: torch.Tensor,  # v_cache: [num_blocks, block_size, Hkv, D] contiguous
    block_tables: torch.Tensor,  # block_tables: [batch, max_blocks] int32
    context_lens: torch.Tensor,  # context_lens: [batch] int32, each in [1, max_blocks * block_size]
    scale: float,
    sliding_window: int | None = None,
    arm: int = GENERIC,  # GENERIC or WARP
) -> torch.Tensor:  # [batch, Hq, D], q.dtype
    """`launch_decode` after the checks that name the bad argument: the entry for a direct call."""
    check_inputs(q, k_cache, v_cache, block_tables, context_lens)
    d, group = q.shape[2], q.shape[1] // k_cache.shape[2]
    if not supports(arm, d, group, q.dtype):
        raise ValueError(f"q: arm {arm} does not support head_dim {d}, group {group}, dtype {q.dtype}")
    ffi.require_window(sliding_window)
    return launch_decode(q, k_cache, v_cache, block_tables, context_lens, scale, sliding_window, arm)


def supports_inputs(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
) -> bool:
    """What a paged decode kernel (this module's, the tiled ones) needs past the op's check (engine/ops/paged_attn.py:
    ranks, dtypes, sizes, groups, the window) and its arm's shape predicate: q and the caches contiguous, every
    tensor on q's device. The table's arms ask this, then launch unchecked (`launch_decode`)."""
    dev = q.device
    same = all(t.device == dev for t in (k_cache, v_cache, block_tables, context_lens))
    return same and q.is_contiguous() and k_cache.is_contiguous() and v_cache.is_contiguous()


def launch_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    arm: int = GENERIC,
) -> torch.Tensor:  # [batch, Hq, D], q.dtype
    """The launch of `arm` (arguments as `paged_decode_attention`'s), its inputs already checked (by
    `paged_decode_attention`, or by the table's check, `supports` and `supports_inputs`). The tables and lengths go
    to the kernel as int32 (a no-op when they are: the staged step's are)."""
    tables, lens = block_tables.to(torch.int32).contiguous(), context_lens.to(torch.int32).contiguous()
    batch, hq, d = q.shape
    out = torch.empty_like(q)
    block_size, max_blocks = k_cache.shape[1], tables.shape[1]
    ws = (
        torch.empty(batch, hq, max_blocks * block_size, dtype=torch.float32, device=q.device)
        if arm == GENERIC
        else None
    )
    lib = _lib()
    rc = lib.vt_paged_attn_decode(
        *ffi.ptrs(out, q, k_cache, v_cache, tables, lens, ws),
        batch,
        hq,
        k_cache.shape[2],
        d,
        block_size,
        max_blocks,
        scale,
        sliding_window or 0,
        arm,
        ffi.dtype_code(q, "q"),
        ffi.stream(q.device),
    )
    ffi.check(rc, "vt_paged_attn_decode", lib, "paged_attn")
    return out
