"""Binding for the RoPE kernels (rope.cu): neox RoPE, Qwen3's q/k RMSNorm fused with it, and q/k norm + RoPE + KV store."""

from __future__ import annotations

import ctypes
from functools import cache

import torch

from engine.cuda import build, ffi
from engine.cuda.norm import mean_scale

_P = ctypes.c_void_p
_I = ctypes.c_int
_L = ctypes.c_longlong
_F = ctypes.c_float

MAX_FUSED_HEAD_DIM = 512  # 2 * kWarpSize * kMaxPairsPerLane: a head row in one warp's registers

SIGNATURES: dict[str, list] = {  # launcher -> argtypes (a test holds them to rope.cu)
    "vt_rope_neox": [_P, _P, _P, _P, _L, _I, _I, _L, _L, _I, _P],
    "vt_rope_qk_norm_rope": [_P, _P, _P, _P, _P, _L, _I, _I, _L, _L, _F, _F, _I, _P],
    "vt_rope_qkv_norm_rope_store": [_P] * 12 + [_L, _I, _I, _I] + [_L] * 6 + [_F, _F, _F, _I, _P],
}


@cache
def _lib() -> ctypes.CDLL:
    lib = build.load("rope.cu")
    for name, argtypes in SIGNATURES.items():
        ffi.bind(lib, name, argtypes)
    return lib


def _check(
    x: torch.Tensor,  # x: [tokens, heads, head_dim]
    cos: torch.Tensor,  # cos: [tokens, head_dim], x.dtype
    sin: torch.Tensor,  # sin: [tokens, head_dim], x.dtype
) -> None:
    """The checks of a direct call, naming the bad tensor."""
    if not x.is_cuda:
        raise ValueError(f"x: expected a CUDA tensor, got device {x.device}")
    ffi.require(x, "x", dim=3, contiguous=False)
    tokens, _, head_dim = x.shape
    if head_dim % 2:
        raise ValueError(f"x: head_dim must be even, got shape {tuple(x.shape)}")
    for name, t in (("cos", cos), ("sin", sin)):
        ffi.require(t, name, dim=2, dtype=x.dtype, device=x.device, contiguous=False)
        if tuple(t.shape) != (tokens, head_dim):
            raise ValueError(f"{name}: shape {tuple(t.shape)} != (tokens, head_dim) = {(tokens, head_dim)}")


def supports(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *_: object) -> bool:
    """What the RoPE kernel needs past the op's check (engine/ops/rope.py: ranks, dtypes, sizes): an even head_dim,
    cos and sin on x's device. The table's arm asks this, then launches unchecked (`launch_apply_rope_neox`)."""
    return x.shape[-1] % 2 == 0 and cos.device == x.device and sin.device == x.device


def supports_norm(x: torch.Tensor, weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, eps: float) -> bool:
    """`supports`, and a contiguous norm weight on x's device (`launch_qk_norm_rope`)."""
    return supports(x, cos, sin) and weight.device == x.device and weight.is_contiguous()


def _layout(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """x with a contiguous last dim and walkable rows, cos/sin contiguous, and a fresh contiguous output."""
    tokens, _, _ = x.shape
    tok_stride, head_stride = _strides(x)
    if x.stride(-1) != 1 or head_stride < x.shape[2] or (tokens > 1 and tok_stride < head_stride * x.shape[1]):
        x = x.contiguous()  # the kernel walks rows by (token, head) strides over a contiguous last dim
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    return x, cos.contiguous(), sin.contiguous(), out


def _rows(x: torch.Tensor) -> tuple[int, int, int, int, int]:
    """The RoPE launchers' row arguments: tokens, heads, head_dim, then the token and head strides (`_strides`)."""
    return (*x.shape, *_strides(x))


def _strides(x: torch.Tensor) -> tuple[int, int]:
    """(token stride, head stride) with the degenerate size-1 dims given their dense values."""
    tokens, heads, head_dim = x.shape
    head = x.stride(1) if heads > 1 else head_dim
    return (x.stride(0) if tokens > 1 else head * heads), head


def apply_rope_neox(
    x: torch.Tensor,  # x: [tokens, heads, head_dim]
    cos: torch.Tensor,  # cos: [tokens, head_dim], x.dtype
    sin: torch.Tensor,  # sin: [tokens, head_dim], x.dtype
) -> torch.Tensor:  # [tokens, heads, head_dim], x.dtype
    """`launch_apply_rope_neox` after the checks that name the bad tensor: the entry for a direct call."""
    _check(x, cos, sin)
    return launch_apply_rope_neox(x, cos, sin)


def launch_apply_rope_neox(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The RoPE launch, its inputs already checked (by `apply_rope_neox`, or the table's check and `supports`)."""
    x, cos, sin, out = _layout(x, cos, sin)
    lib = _lib()
    rc = lib.vt_rope_neox(
        *ffi.ptrs(out, x, cos, sin),
        *_rows(x),
        ffi.dtype_code(x, "x"),
        ffi.stream(x.device),
    )
    ffi.check(rc, "vt_rope_neox", lib, "rope")
    return out


def qk_norm_rope(
    x: torch.Tensor,  # x: [tokens, heads, head_dim]
    weight: torch.Tensor,  # weight: [head_dim], x.dtype
    cos: torch.Tensor,  # cos: [tokens, head_dim], x.dtype
    sin: torch.Tensor,  # sin: [tokens, head_dim], x.dtype
    eps: float,
) -> torch.Tensor:  # [tokens, heads, head_dim], x.dtype
    """`apply_rope_neox(qk_norm(x, weight, eps), cos, sin)` in one launch, with the same rounding points;
    `launch_qk_norm_rope` after the checks that name the bad tensor."""
    _check(x, cos, sin)
    ffi.require(weight, "weight", dim=1, dtype=x.dtype, device=x.device)
    if weight.shape[0] != x.shape[2]:
        raise ValueError(f"weight: dim 0 is {weight.shape[0]} but x's head_dim is {x.shape[2]}")
    return launch_qk_norm_rope(x, weight, cos, sin, eps)


def launch_qk_norm_rope(
    x: torch.Tensor, weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, eps: float
) -> torch.Tensor:
    """The fused q/k norm + RoPE launch, its inputs already checked (by `qk_norm_rope`, or the table's check and
    `supports_norm`)."""
    x, cos, sin, out = _layout(x, cos, sin)
    lib = _lib()
    rc = lib.vt_rope_qk_norm_rope(
        *ffi.ptrs(out, x, weight, cos, sin),
        *_rows(x),
        mean_scale(x.shape[0] * x.shape[1], x.shape[2]),
        eps,
        ffi.dtype_code(x, "x"),
        ffi.stream(x.device),
    )
    ffi.check(rc, "vt_rope_qk_norm_rope", lib, "rope")
    return out


def qkv_norm_rope_store(
    q: torch.Tensor,  # q: [tokens, heads, head_dim], last dim contiguous (a view of the merged q/k/v row is fine)
    k: torch.Tensor,  # k: [tokens, kv_heads, head_dim]
    v: torch.Tensor,  # v: [tokens, kv_heads, head_dim]
    q_weight: torch.Tensor,  # q_weight: [head_dim]
    k_weight: torch.Tensor,  # k_weight: [head_dim]
    cos: torch.Tensor,  # cos: [tokens, head_dim], q.dtype
    sin: torch.Tensor,  # sin: [tokens, head_dim], q.dtype
    eps: float,
    k_cache: torch.Tensor,  # k_cache: [num_blocks, block_size, kv_heads, head_dim] contiguous, q.dtype
    v_cache: torch.Tensor,  # v_cache: same as k_cache
    slot_mapping: torch.Tensor,  # slot_mapping: [tokens] int32/int64; -1 skips the token's cache writes
) -> tuple[torch.Tensor, torch.Tensor]:  # (q_out [tokens, heads, head_dim], k_out [tokens, kv_heads, head_dim])
    """`qk_norm_rope` of q and of k, and `store_kv(k_out, v, ...)`, in one launch; slots are not range-checked."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 3 or t.stride(-1) != 1:
            raise ValueError(
                f"{name}: expected [tokens, heads, head_dim] with a contiguous last dim, got shape "
                f"{tuple(t.shape)} strides {t.stride()}"
            )
        if t.dtype != q.dtype:
            raise TypeError(f"{name}: dtype {t.dtype} != q's {q.dtype}")
    tokens, heads, d = q.shape
    if k.shape[0] != tokens or k.shape[2] != d or v.shape != k.shape:
        raise ValueError(f"k, v: shapes {tuple(k.shape)}, {tuple(v.shape)} do not pair with q's {tuple(q.shape)}")
    if d % 2:
        raise ValueError(f"q: head_dim must be even, got {d}")
    for name, t in (("q_weight", q_weight), ("k_weight", k_weight)):
        if tuple(t.shape) != (d,):
            raise ValueError(f"{name}: shape {tuple(t.shape)} != (head_dim,) = ({d},)")
    for name, t in (("cos", cos), ("sin", sin)):
        if tuple(t.shape) != (tokens, d):
            raise ValueError(f"{name}: shape {tuple(t.shape)} != (tokens, head_dim) = {(tokens, d)}")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dim() != 4 or tuple(t.shape[2:]) != (k.shape[1], d) or not t.is_contiguous():
            raise ValueError(
                f"{name}: expected a contiguous [blocks, block_size, {k.shape[1]}, {d}], got shape {tuple(t.shape)}"
            )
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"v_cache: shape {tuple(v_cache.shape)} != k_cache's {tuple(k_cache.shape)}")
    if tuple(slot_mapping.shape) != (tokens,):
        raise ValueError(f"slot_mapping: shape {tuple(slot_mapping.shape)} != (tokens,) = ({tokens},)")
    if not q.is_cuda:
        raise ValueError(f"q: expected a CUDA tensor, got device {q.device}")
    for name, t in (
        ("k", k),
        ("v", v),
        ("q_weight", q_weight),
        ("k_weight", k_weight),
        ("cos", cos),
        ("sin", sin),
        ("k_cache", k_cache),
        ("v_cache", v_cache),
    ):
        ffi.require(t, name, dim=t.dim(), dtype=q.dtype, device=q.device, contiguous=False)
    return launch_qkv_norm_rope_store(q, k, v, q_weight, k_weight, cos, sin, eps, k_cache, v_cache, slot_mapping)


def supports_store(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *rest: object) -> bool:
    """What the fused norm-RoPE-store kernel needs past the op's check (ranks, dtypes, shapes, contiguous caches):
    an even head_dim of at most MAX_FUSED_HEAD_DIM, contiguous last dims of q, k and v, and every tensor (the rest of
    `qkv_norm_rope_store`'s arguments too) on q's device. The table's arm asks this, then launches unchecked
    (`launch_qkv_norm_rope_store`)."""
    d = q.shape[-1]
    rows = d % 2 == 0 and d <= MAX_FUSED_HEAD_DIM and all(t.stride(-1) == 1 for t in (q, k, v))
    others = [t for t in (k, v, *rest) if isinstance(t, torch.Tensor)]
    return rows and all(t.device == q.device for t in others)


def launch_qkv_norm_rope_store(
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
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused launch, its inputs already checked (by `qkv_norm_rope_store`, or the table's check and
    `supports_store`)."""
    tokens, heads, d = q.shape
    slots = slot_mapping if slot_mapping.dtype == torch.int64 else slot_mapping.long()
    cos, sin = cos.contiguous(), sin.contiguous()
    q_weight, k_weight = q_weight.contiguous(), k_weight.contiguous()  # held until the launch
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    k_out = torch.empty(k.shape, dtype=q.dtype, device=q.device)
    (q_tok, q_head), (k_tok, k_head), (v_tok, v_head) = _strides(q), _strides(k), _strides(v)
    lib = _lib()
    rc = lib.vt_rope_qkv_norm_rope_store(
        *ffi.ptrs(q_out, k_out, k_cache, v_cache, q, k, v, q_weight, k_weight, cos, sin, slots),
        tokens,
        heads,
        k.shape[1],
        d,
        q_tok,
        q_head,
        k_tok,
        k_head,
        v_tok,
        v_head,
        mean_scale(tokens * heads, d),
        mean_scale(tokens * k.shape[1], d),
        eps,
        ffi.dtype_code(q, "q"),
        ffi.stream(q.device),
    )
    ffi.check(rc, "vt_rope_qkv_norm_rope_store", lib, "rope")
    return q_out, k_out
