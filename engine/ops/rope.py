"""Rotary position embedding, neox (rotate-half) style, with HF's fp32 cos/sin (row KERNEL-ROPE)."""

from __future__ import annotations

import functools
from typing import Any

import torch

from engine.ops._check import FLOAT_DTYPES, INDEX_DTYPES, check_dim, check_same_dtype, check_tensor
from engine.ops._compose import REFERENCES, composite
from engine.ops.kv_store import check_store_kv
from engine.ops.norm import check_qk_norm


def rope_cos_sin(
    positions: torch.Tensor,  # positions: [tokens] int64
    head_dim: int,
    theta: float,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:  # (cos, sin), each [tokens, head_dim], dtype
    """cos/sin tables for the default ("rope_type": "default") rotary embedding.

    Computed in fp32 exactly as Hugging Face's Qwen3RotaryEmbedding:
      inv_freq = 1 / theta ** (arange(0, head_dim, 2, fp32) / head_dim)   (fp32 pow, fp32 divide)
      freqs    = positions.float()[:, None] * inv_freq[None, :]            (one fp32 multiply)
      emb      = cat(freqs, freqs)                                          (neox layout)
      cos, sin = emb.cos(), emb.sin()                                       (fp32)
    then each is rounded once to `dtype` (the model dtype). Positions must be
    below 2**24 so that `positions.float()` is exact.
    """
    check_tensor(positions, "positions", ndim=1, dtypes=INDEX_DTYPES)
    if head_dim <= 0 or head_dim % 2:
        raise ValueError(f"head_dim: expected a positive even number, got {head_dim}")
    if theta <= 0:
        raise ValueError(f"theta: expected > 0, got {theta}")
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"dtype: {dtype} is not a float model dtype")
    inv_freq = _inv_freq(head_dim, float(theta), positions.device)
    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope_neox(
    x: torch.Tensor,  # x: [tokens, heads, head_dim]
    cos: torch.Tensor,  # cos: [tokens, head_dim], x.dtype
    sin: torch.Tensor,  # sin: [tokens, head_dim], x.dtype
) -> torch.Tensor:  # [tokens, heads, head_dim], x.dtype
    """`x * cos + rotate_half(x) * sin`, rotate_half(x) = cat(-x[half:], x[:half]).

    Rounding (as Hugging Face's apply_rotary_pos_emb in the model dtype): each
    product is rounded to x.dtype, then the sum is rounded to x.dtype. A fused
    kernel that keeps the products in fp32 differs by one rounding.
    """
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    c, s = cos[:, None, :], sin[:, None, :]
    # The products and the sum in place on fresh tensors: the same roundings as `(x * c) + (rotated * s)`.
    return (x * c).add_(rotated.mul_(s))


def check_apply_rope_neox(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    check_tensor(x, "x", ndim=3, dtypes=FLOAT_DTYPES)
    for name, t in (("cos", cos), ("sin", sin)):
        check_tensor(t, name, ndim=2)
        check_same_dtype(t, name, x, "x")
        check_dim(t, name, 0, x.shape[0], "x's tokens")
        check_dim(t, name, 1, x.shape[2], "x's head_dim")


@composite
def qk_norm_rope(
    parts: Any,  # the ops it runs, by name: the references (_compose.references) or the kernel table's
    x: torch.Tensor,  # x: [tokens, heads, head_dim]
    weight: torch.Tensor,  # weight: [head_dim], x.dtype
    cos: torch.Tensor,  # cos: [tokens, head_dim], x.dtype
    sin: torch.Tensor,  # sin: [tokens, head_dim], x.dtype
    eps: float,
) -> torch.Tensor:  # [tokens, heads, head_dim], x.dtype
    """Qwen3's q/k path, `apply_rope_neox(qk_norm(x, weight, eps), cos, sin)`, with both ops' rounding points.

    The fused CUDA arm (VT_QK_NORM_ROPE_FUSED) is one launch, whose fp32 sum of squares runs in another
    order than torch's.
    """
    return parts.apply_rope_neox(parts.qk_norm(x, weight, eps), cos, sin)


def check_qk_norm_rope(x: torch.Tensor, weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, eps: float) -> None:
    check_qk_norm(x, weight, eps)
    check_apply_rope_neox(x, cos, sin)


@composite
def qkv_norm_rope_store(
    parts: Any,  # as qk_norm_rope's
    q: torch.Tensor,  # q: [tokens, heads, head_dim]
    k: torch.Tensor,  # k: [tokens, kv_heads, head_dim]
    v: torch.Tensor,  # v: [tokens, kv_heads, head_dim]
    q_weight: torch.Tensor,  # q_weight: [head_dim]
    k_weight: torch.Tensor,  # k_weight: [head_dim]
    cos: torch.Tensor,  # cos: [tokens, head_dim]
    sin: torch.Tensor,  # sin: [tokens, head_dim]
    eps: float,
    k_cache: torch.Tensor,  # k_cache: [num_blocks, block_size, kv_heads, head_dim]
    v_cache: torch.Tensor,  # v_cache: same as k_cache
    slot_mapping: torch.Tensor,  # slot_mapping: [tokens] int32/int64; -1 skips the token
) -> tuple[torch.Tensor, torch.Tensor]:  # (q, k) after norm and RoPE, x.dtype
    """A decoder layer's q/k path and its KV store: `qk_norm_rope` of q and of k, then `store_kv(k, v, ...)`.

    Each op's rounding points; the cache gets the rotated k exactly as returned. The fused CUDA arm
    (VT_QKV_ROPE_STORE) is one launch for all three. The CPU reference runs q and k as one tensor (`_qk_as_one`)."""
    if parts is REFERENCES and q.device.type == "cpu":  # a GPU's reduction kernel may split rows by the shape
        q_out, k_out = _qk_as_one(parts, q, k, q_weight, k_weight, cos, sin, eps)
    else:
        q_out = parts.qk_norm_rope(q, q_weight, cos, sin, eps)
        k_out = parts.qk_norm_rope(k, k_weight, cos, sin, eps)
    parts.store_kv(k_out, v, k_cache, v_cache, slot_mapping)
    return q_out, k_out


def _qk_as_one(
    parts: Any,  # the references (their modules' attributes, looked up at the call: a patched op is the one run)
    q: torch.Tensor,  # q: [tokens, heads, head_dim]
    k: torch.Tensor,  # k: [tokens, kv_heads, head_dim]
    q_weight: torch.Tensor,  # q_weight: [head_dim]
    k_weight: torch.Tensor,  # k_weight: [head_dim]
    cos: torch.Tensor,  # cos: [tokens, head_dim]
    sin: torch.Tensor,  # sin: [tokens, head_dim]
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:  # (q, k) after norm and RoPE, as qk_norm_rope gives each
    """`qk_norm_rope` of q and of k through one norm and one RoPE over their heads side by side: the norm's sums
    run over each head's own head_dim values and every other step is elementwise (a head's weight row, the
    token's cos/sin row), so each value is the one the two calls give, at half the ops (a decode layer on the CPU
    runs tens of small ops; tests/engine/ops/test_rope.py holds it bitwise to the two calls)."""
    hq = q.shape[1]
    x = torch.cat((q, k), dim=1)
    weight = torch.cat((q_weight.expand(hq, -1), k_weight.expand(k.shape[1], -1)))  # [heads + kv_heads, head_dim]
    out = parts.apply_rope_neox(parts.qk_norm(x, weight, eps), cos, sin)  # the reference qk_norm broadcasts weight
    # q contiguous, as each call's output was (the attention's GEMMs read it); k only feeds copies
    return out[:, :hq].contiguous(), out[:, hq:]


def check_qkv_norm_rope_store(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    eps: float,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    check_qk_norm_rope(q, q_weight, cos, sin, eps)
    check_qk_norm_rope(k, k_weight, cos, sin, eps)
    check_same_dtype(k, "k", q, "q")
    check_store_kv(k, v, k_cache, v_cache, slot_mapping)


@functools.lru_cache(maxsize=32)
def _inv_freq(head_dim: int, theta: float, device: torch.device) -> torch.Tensor:
    """Computed on the CPU, as Hugging Face does at init, then moved once: the device's pow may differ
    in the last bit, and a copy from the host inside a captured decode step is illegal."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
    return inv_freq.to(device)
