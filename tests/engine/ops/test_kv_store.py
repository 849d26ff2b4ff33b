"""Tests for engine.ops.kv_store: paged store by slot mapping."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from engine import kernels
from engine.flags import REFERENCE

# the table with every kernel off: its entry checks, then the pure-torch reference
store_kv = partial(kernels.store_kv, REFERENCE)


@pytest.mark.parametrize("padding", [[2, 7], []], ids=["padded", "every-token"])
def test_store_kv_writes_each_slot_and_skips_padding(padding, dtype, gen):
    num_blocks, block_size, heads, head_dim, tokens = 7, 5, 3, 19, 11
    k_cache = torch.randn(num_blocks, block_size, heads, head_dim, generator=gen).to(dtype)
    v_cache = torch.randn(num_blocks, block_size, heads, head_dim, generator=gen).to(dtype)
    before_k, before_v = k_cache.clone(), v_cache.clone()
    k = torch.randn(tokens, heads, head_dim, generator=gen).to(dtype)
    v = torch.randn(tokens, heads, head_dim, generator=gen).to(dtype)
    slots = torch.randperm(num_blocks * block_size, generator=gen)[:tokens]
    slots[padding] = -1  # none: a decode step's rows, written without masked copies
    store_kv(k, v, k_cache, v_cache, slots.int())
    expected_k, expected_v = before_k.clone(), before_v.clone()
    for t, s in enumerate(slots.tolist()):  # python loop: block = s // block_size, offset = s % block_size
        if s == -1:
            continue
        expected_k[s // block_size, s % block_size] = k[t]
        expected_v[s // block_size, s % block_size] = v[t]
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)
    assert not torch.equal(k_cache, before_k)


def test_store_kv_rejects_bad_input(gen):
    k = torch.randn(3, 2, 4, generator=gen)
    cache = torch.randn(2, 2, 2, 4, generator=gen)
    with pytest.raises(IndexError, match="slot_mapping: slot 4 >= cache slots 4"):
        store_kv(k, k, cache, cache.clone(), torch.tensor([0, 1, 4]))
    with pytest.raises(ValueError, match="slot_mapping: two tokens write the same slot"):
        store_kv(k, k, cache, cache.clone(), torch.tensor([1, 1, -1]))
    with pytest.raises(ValueError, match="slot_mapping: two tokens write the same slot"):
        store_kv(k, k, cache, cache.clone(), torch.tensor([1, 3, 1]))
    padded = cache.clone()  # several padding tokens (-1) are not two writes of one slot
    store_kv(k, k, padded, padded.clone(), torch.tensor([3, -1, -1]))
    assert torch.equal(padded.view(-1, 2, 4)[3], k[0])
    with pytest.raises(ValueError, match="slot_mapping: values below -1"):
        store_kv(k, k, cache, cache.clone(), torch.tensor([1, -2, 0]))
    with pytest.raises(ValueError, match="k_cache: dim 2 is 2 but k's num_kv_heads is 3"):
        store_kv(torch.randn(3, 3, 4), torch.randn(3, 3, 4), cache, cache.clone(), torch.tensor([0, 1, 2]))
    with pytest.raises(TypeError, match="k_cache: dtype bfloat16 differs from k's float32"):
        store_kv(k, k, cache.bfloat16(), cache.bfloat16(), torch.tensor([0, 1, 2]))


def test_store_kv_accepts_strided_kv_and_rejects_a_strided_cache(dtype, gen):
    kv = torch.randn(5, 2, 3, 19, generator=gen).to(dtype)  # [tokens, k|v, heads, D], one fused tensor
    k, v = kv[:, 0], kv[:, 1]
    k_cache = torch.zeros(3, 4, 3, 19, dtype=dtype)
    v_cache = torch.zeros(3, 4, 3, 19, dtype=dtype)
    slots = torch.tensor([11, 0, -1, 5, 6])
    store_kv(k, v, k_cache, v_cache, slots)
    for t, s in enumerate(slots.tolist()):
        if s >= 0:
            assert torch.equal(k_cache[s // 4, s % 4], k[t]) and torch.equal(v_cache[s // 4, s % 4], v[t])
    with pytest.raises(ValueError, match="k_cache: must be contiguous"):
        store_kv(k, v, k_cache.transpose(0, 1), v_cache.transpose(0, 1), slots)
