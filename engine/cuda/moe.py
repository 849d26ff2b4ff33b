"""Binding for the MoE kernels (moe.cu): top-k softmax routing, token-to-expert alignment, grouped expert GEMMs."""

from __future__ import annotations

import ctypes
from functools import cache
from typing import NamedTuple

import torch

from engine.cuda import build, ffi

_P = ctypes.c_void_p
_I = ctypes.c_int
# Limits of moe.cuh (kMaxExperts, kMaxTopK, kMaxAlignExperts), checked against it by the tests.
MAX_ROUTE_EXPERTS = 512
MAX_TOP_K = 32
MAX_ALIGN_EXPERTS = 1024


# The launchers' C signatures (argument kinds in order), checked against moe.cu by the tests.
SIGNATURES: dict[str, list] = {
    "vt_moe_route": [_P] * 3 + [_I] * 6 + [_P],
    "vt_moe_align": [_P] * 4 + [_I] * 4 + [_P],
    "vt_moe_experts": [_P] * 10 + [_I] * 8 + [_P],
    "vt_moe_block_m": [],
}


@cache
def _lib() -> ctypes.CDLL:
    lib = build.load("moe.cu")
    for name, argtypes in SIGNATURES.items():
        ffi.bind(lib, name, argtypes)
    lib.vt_moe_capacity.argtypes = [ctypes.c_longlong, _I, _I]
    lib.vt_moe_capacity.restype = ctypes.c_longlong
    return lib


class Alignment(NamedTuple):
    """Flat (token, slot) indices grouped by expert, each group padded to a multiple of block_m."""

    sorted_ids: torch.Tensor  # [capacity] int32; padding holds numel = tokens * top_k
    block_expert: torch.Tensor  # [capacity / block_m] int32; the expert of each row block, -1 past the end
    offsets: torch.Tensor  # [experts + 1] int32; expert e's rows are offsets[e] .. offsets[e + 1]


def supports(num_experts: int, top_k: int) -> bool:
    """Whether the routing and expert kernels take this many experts and slots (else use the reference)."""
    return 1 <= top_k <= min(num_experts, MAX_TOP_K) and num_experts <= MAX_ROUTE_EXPERTS


def block_m() -> int:
    """The row block of the grouped GEMM, which the alignment pads to."""
    return int(_lib().vt_moe_block_m())


def route(
    router_logits: torch.Tensor,  # router_logits: [tokens, experts]
    top_k: int,
    renormalize: bool,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:  # weights [tokens, top_k] dtype, ids [tokens, top_k] int64
    """fp32 softmax, the top_k (ties: lower expert id first), optional renormalisation, weights cast once."""
    router_logits = router_logits.contiguous()
    ffi.require(router_logits, "router_logits", dim=2)
    tokens, experts = router_logits.shape
    weights = torch.empty(tokens, top_k, dtype=dtype, device=router_logits.device)
    ids = torch.empty(tokens, top_k, dtype=torch.int64, device=router_logits.device)
    lib = _lib()
    rc = lib.vt_moe_route(
        *ffi.ptrs(router_logits, weights, ids),
        tokens,
        experts,
        top_k,
        int(renormalize),
        ffi.dtype_code(router_logits, "router_logits"),
        ffi.dtype_code(weights, "dtype"),
        ffi.stream(router_logits.device),
    )
    ffi.check(rc, "vt_moe_route", lib, "moe")
    return weights, ids


def align(
    ids: torch.Tensor,  # ids: [tokens, top_k] int
    num_experts: int,
    block: int | None = None,
) -> Alignment:
    """Sorted (token, slot) indices per expert, ascending within an expert; ids outside [0, E) are dropped."""
    ffi.require(ids, "ids", dim=2)
    ids = ids.to(torch.int64)
    block = block or block_m()
    lib = _lib()
    numel = ids.numel()
    capacity = int(lib.vt_moe_capacity(numel, num_experts, block))
    dev = ids.device
    out = Alignment(
        torch.empty(capacity, dtype=torch.int32, device=dev),
        torch.empty(capacity // block, dtype=torch.int32, device=dev),
        torch.empty(num_experts + 1, dtype=torch.int32, device=dev),
    )
    rc = lib.vt_moe_align(
        *ffi.ptrs(ids, out.sorted_ids, out.block_expert, out.offsets),
        numel,
        num_experts,
        block,
        capacity,
        ffi.stream(dev),
    )
    ffi.check(rc, "vt_moe_align", lib, "moe")
    return out


def experts(
    x: torch.Tensor,  # x: [tokens, H]
    gate_up: torch.Tensor,  # gate_up: [E, 2*I, H], gate rows first
    down: torch.Tensor,  # down: [E, H, I]
    weights: torch.Tensor,  # weights: [tokens, top_k], x.dtype
    ids: torch.Tensor,  # ids: [tokens, top_k] int, distinct per token
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:  # [tokens, H], out_dtype (default x.dtype)
    """Grouped expert MLPs: gate_up GEMM, silu-and-mul, down GEMM, weighted sum in ascending expert id.
    `launch_experts` after the checks that name the bad tensor: the entry for a direct call."""
    ffi.require(x, "x", dim=2, contiguous=False)
    dev = x.device
    ffi.require(gate_up, "gate_up", dim=3, dtype=x.dtype, device=dev)
    ffi.require(down, "down", dim=3, dtype=x.dtype, device=dev)
    ffi.require(weights, "weights", dim=2, dtype=x.dtype, device=dev, contiguous=False)
    ffi.require(ids, "ids", dim=2, device=dev)
    tokens, hidden = x.shape
    num_experts, two_inter, _ = gate_up.shape
    inter = two_inter // 2
    if gate_up.shape != (num_experts, 2 * inter, hidden):
        raise ValueError(f"gate_up: shape {tuple(gate_up.shape)} is not [E, 2*I, H={hidden}]")
    if down.shape != (num_experts, hidden, inter):
        raise ValueError(f"down: shape {tuple(down.shape)} != [E={num_experts}, H={hidden}, I={inter}]")
    if weights.shape != ids.shape or ids.shape[0] != tokens:
        raise ValueError(
            f"weights {tuple(weights.shape)} and ids {tuple(ids.shape)} must both be [tokens={tokens}, top_k]"
        )
    return launch_experts(x, gate_up, down, weights, ids, out_dtype)


def supports_experts(
    x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor
) -> bool:
    """What the grouped expert kernel needs past the op's check (engine/ops/moe.py: ranks, dtypes, shapes):
    `supports` of its experts and slots, contiguous expert weights and every tensor on x's device. The table's arm
    asks this, then runs `launch_experts`."""
    same = all(t.device == x.device for t in (gate_up, down, weights, ids))
    dense = gate_up.is_contiguous() and down.is_contiguous() and ids.is_contiguous()
    return same and dense and supports(gate_up.shape[0], ids.shape[1])


def launch_experts(
    x: torch.Tensor,
    gate_up: torch.Tensor,
    down: torch.Tensor,
    weights: torch.Tensor,
    ids: torch.Tensor,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """The grouped expert launch, its inputs already checked (by `experts`, or the table's check and
    `supports_experts`)."""
    x, weights = x.contiguous(), weights.contiguous()
    dev = x.device
    tokens, hidden = x.shape
    num_experts, two_inter, _ = gate_up.shape
    inter = two_inter // 2
    top_k = ids.shape[1]
    ids = ids.to(torch.int64).contiguous()
    al = align(ids, num_experts)
    act = torch.empty(tokens * top_k, inter, dtype=x.dtype, device=dev)
    y = torch.empty(tokens * top_k, hidden, dtype=x.dtype, device=dev)
    out = torch.empty(tokens, hidden, dtype=out_dtype or x.dtype, device=dev)
    lib = _lib()
    rc = lib.vt_moe_experts(
        *ffi.ptrs(x, gate_up, down, weights, ids, al.sorted_ids, al.block_expert, act, y, out),
        tokens,
        hidden,
        inter,
        num_experts,
        top_k,
        al.sorted_ids.numel(),
        ffi.dtype_code(x, "x"),
        ffi.dtype_code(out, "out"),
        ffi.stream(dev),
    )
    ffi.check(rc, "vt_moe_experts", lib, "moe")
    return out
