"""Paged KV cache store by slot mapping (row KERNEL-KV-STORE)."""

from __future__ import annotations

import torch

from engine.ops._check import FLOAT_DTYPES, INDEX_DTYPES, check_dim, check_same_dtype, check_tensor, refuse_capture


def store_kv(
    k: torch.Tensor,  # k: [tokens, num_kv_heads, head_dim]
    v: torch.Tensor,  # v: [tokens, num_kv_heads, head_dim]
    k_cache: torch.Tensor,  # k_cache: [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor,  # v_cache: [num_blocks, block_size, num_kv_heads, head_dim]
    slot_mapping: torch.Tensor,  # slot_mapping: [tokens] int32/int64
) -> None:
    """Write token t's K/V to slot `slot_mapping[t]` = block * block_size + offset, in place.

    A slot of -1 is skipped (padding tokens). Exact copy, no rounding: k/v must
    already be in the cache dtype. Two tokens with the same slot is an error
    (the winner would be unspecified on a GPU). The slot values are checked here, in the reference
    (a host read); the CUDA store does not range-check them.
    """
    refuse_capture(k, "store_kv", "leave VT_KERNELS on to capture the decode step")
    num_slots = k_cache.shape[0] * k_cache.shape[1]
    # one host read, the checks in Python: a step writes tens to thousands of slots, and torch's min, max and
    # unique (a sort) cost more in dispatch than a set of that size does
    wanted = slot_mapping.tolist()
    if not wanted:
        return
    low, high = min(wanted), max(wanted)
    if low < -1:
        raise ValueError("slot_mapping: values below -1")
    if high >= num_slots:
        raise IndexError(f"slot_mapping: slot {high} >= cache slots {num_slots}")
    if low == -1:  # padding tokens: only the others are written
        keep = slot_mapping >= 0
        slots, k, v = slot_mapping[keep].long(), k[keep], v[keep]
        written = len(wanted) - wanted.count(-1)
        distinct = len(set(wanted)) - 1
    else:  # every token written (a decode step): no masked copies
        slots = slot_mapping.long()
        written, distinct = len(wanted), len(set(wanted))
    if distinct != written:
        raise ValueError("slot_mapping: two tokens write the same slot")
    k_cache.view(num_slots, *k_cache.shape[2:]).index_copy_(0, slots, k)
    v_cache.view(num_slots, *v_cache.shape[2:]).index_copy_(0, slots, v)


def check_store_kv(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    check_tensor(k, "k", ndim=3, dtypes=FLOAT_DTYPES)
    check_tensor(v, "v", ndim=3)
    check_tensor(k_cache, "k_cache", ndim=4)
    check_tensor(v_cache, "v_cache", ndim=4)
    check_tensor(slot_mapping, "slot_mapping", ndim=1, dtypes=INDEX_DTYPES)
    if v.shape != k.shape:
        raise ValueError(f"v: shape {tuple(v.shape)} != k's {tuple(k.shape)}")
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"v_cache: shape {tuple(v_cache.shape)} != k_cache's {tuple(k_cache.shape)}")
    for name, t in (("v", v), ("k_cache", k_cache), ("v_cache", v_cache)):
        check_same_dtype(t, name, k, "k")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not t.is_contiguous():  # slots index the flat [num_blocks * block_size] view
            raise ValueError(f"{name}: must be contiguous (strides {t.stride()})")
    check_dim(slot_mapping, "slot_mapping", 0, k.shape[0], "k's tokens")
    check_dim(k_cache, "k_cache", 2, k.shape[1], "k's num_kv_heads")
    check_dim(k_cache, "k_cache", 3, k.shape[2], "k's head_dim")
