"""Binding for the paged KV store kernel (kv_store.cu): write K/V rows to their cache slots, slot -1 skipped."""

from __future__ import annotations

import ctypes
from functools import cache

import torch

from engine.cuda import build, ffi

_P, _I, _L = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong


@cache
def _lib() -> ctypes.CDLL:
    lib = build.load("kv_store.cu")
    ffi.bind(lib, "vt_kv_store_store", [_P, _P, _P, _P, _P, _I, _I, _I, _L, _L, _I, _P])
    return lib


def store_kv(
    k: torch.Tensor,  # k: [tokens, num_kv_heads, head_dim]; heads and head_dim contiguous
    v: torch.Tensor,  # v: [tokens, num_kv_heads, head_dim]
    k_cache: torch.Tensor,  # k_cache: [num_blocks, block_size, num_kv_heads, head_dim] contiguous
    v_cache: torch.Tensor,  # v_cache: same shape as k_cache
    slot_mapping: torch.Tensor,  # slot_mapping: [tokens] int32/int64; -1 skips the token
) -> None:
    """In-place copy, like engine.ops.kv_store.store_kv; slot values are not range-checked (that needs a sync).
    `launch_store_kv` after the checks that name the bad tensor: the entry for a direct call."""
    dev = k.device
    for name, t in (("k", k), ("v", v)):
        ffi.require(t, name, dim=3, dtype=k_cache.dtype, device=dev, contiguous=False)
        if t.stride(2) != 1 or t.stride(1) != t.shape[2]:
            raise ValueError(f"{name}: heads and head_dim must be contiguous (strides {t.stride()})")
    if v.shape != k.shape:
        raise ValueError(f"v: shape {tuple(v.shape)} != k's {tuple(k.shape)}")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        ffi.require(t, name, dim=4, device=dev)
        if tuple(t.shape[2:]) != tuple(k.shape[1:]):
            raise ValueError(f"{name}: heads/head_dim {tuple(t.shape[2:])} != k's {tuple(k.shape[1:])}")
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"v_cache: shape {tuple(v_cache.shape)} != k_cache's {tuple(k_cache.shape)}")
    ffi.require(slot_mapping, "slot_mapping", dim=1, device=dev)
    if slot_mapping.shape[0] != k.shape[0]:
        raise ValueError(f"slot_mapping: {slot_mapping.shape[0]} entries for {k.shape[0]} tokens")
    launch_store_kv(k, v, k_cache, v_cache, slot_mapping)


def supports(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> bool:
    """What the store kernel needs past the op's check (engine/ops/kv_store.py: ranks, dtypes, shapes, contiguous
    caches): k's and v's heads and head_dim contiguous, every tensor on k's device. The table's arm asks this, then
    launches unchecked (`launch_store_kv`)."""
    rows = all(t.stride(2) == 1 and t.stride(1) == t.shape[2] for t in (k, v))
    return rows and all(t.device == k.device for t in (v, k_cache, v_cache, slot_mapping))


def launch_store_kv(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """The store launch, its inputs already checked (by `store_kv`, or by the table's check and `supports`)."""
    dev = k.device
    slots = slot_mapping if slot_mapping.dtype == torch.int64 else slot_mapping.long()
    lib = _lib()
    rc = lib.vt_kv_store_store(
        *ffi.ptrs(k, v, k_cache, v_cache, slots),
        k.shape[0],
        k.shape[1],
        k.shape[2],
        k.stride(0),
        v.stride(0),
        ffi.dtype_code(k, "k"),
        ffi.stream(dev),
    )
    ffi.check(rc, "vt_kv_store_store", lib, "kv_store")
