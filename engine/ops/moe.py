"""Mixture-of-experts routing and the expert MLPs, as Hugging Face's Qwen3-MoE block (row KERNEL-MOE)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.ops._check import (
    FLOAT_DTYPES,
    INDEX_DTYPES,
    check_dim,
    check_same_dtype,
    check_tensor,
    refuse_capture,
    values_checkable,
)


def moe_route(
    router_logits: torch.Tensor,  # router_logits: [tokens, num_experts]
    top_k: int,
    renormalize: bool,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:  # (weights [tokens, top_k] dtype, ids [tokens, top_k] int64)
    """Softmax over experts, keep the top_k, optionally renormalise them to sum 1.

    Rounding (Qwen3MoeTopKRouter): the softmax is fp32 (the logits are upcast),
    top-k is taken on the fp32 probabilities (torch.topk, descending), the
    renormalising divide is fp32, and the weights are rounded to `dtype` once at
    the end (Hugging Face uses the router logits' dtype, i.e. the model dtype).
    """
    probs = torch.softmax(router_logits, dim=-1, dtype=torch.float32)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(dtype), ids


def check_moe_route(router_logits: torch.Tensor, top_k: int, renormalize: bool, dtype: torch.dtype) -> None:
    check_tensor(router_logits, "router_logits", ndim=2, dtypes=FLOAT_DTYPES)
    if not 1 <= top_k <= router_logits.shape[1]:
        raise ValueError(f"top_k: {top_k} not in [1, num_experts={router_logits.shape[1]}]")
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"dtype: {dtype} is not a float model dtype")


def moe_experts(
    x: torch.Tensor,  # x: [tokens, H]
    gate_up: torch.Tensor,  # gate_up: [E, 2*I, H], gate rows first, then up rows
    down: torch.Tensor,  # down: [E, H, I]
    weights: torch.Tensor,  # weights: [tokens, top_k], x.dtype
    ids: torch.Tensor,  # ids: [tokens, top_k] int, distinct per token
) -> torch.Tensor:  # [tokens, H], x.dtype
    """`out[t] = sum_j weights[t, j] * down[e] @ silu_and_mul(gate_up[e] @ x[t])`, e = ids[t, j].

    Rounding and order (Qwen3MoeExperts): per expert, the gate_up GEMM, silu
    and mul, the down GEMM and the multiply by the routing weight each round to
    x.dtype (silu_and_mul's rounding). The per-token sum runs over the token's experts in ascending expert
    id, starting from zero, and every partial sum is rounded to x.dtype (Hugging
    Face's index_add_ into an x.dtype buffer). A fused kernel that accumulates
    the experts in fp32 differs from this by the partial-sum roundings.

    The id values are checked here, and the tokens grouped by expert, on the host (which a captured CUDA graph
    cannot hold: on CUDA the table's routed arm, `moe_experts_routed`, takes the decode batches); the kernels
    skip ids outside [0, E) and expect distinct ids per token, as these checks demand.
    """
    num_experts = gate_up.shape[0]
    refuse_capture(ids, "moe_experts", "leave VT_KERNELS on (the routed arm) to capture the MoE step")
    if ids.numel() and values_checkable(ids):
        if int(ids.min()) < 0 or int(ids.max()) >= num_experts:
            raise IndexError(f"ids: values outside [0, {num_experts})")
        if (ids.sort(dim=-1).values.diff(dim=-1) == 0).any():
            raise ValueError("ids: a token selects the same expert twice")
    out = torch.zeros_like(x)
    for e in torch.unique(ids).tolist():  # ascending expert id, as Hugging Face
        slot, token = torch.where(ids.T == e)  # [top_k, tokens] order, as Hugging Face's expert mask
        # silu on the non-contiguous chunk, exactly as Hugging Face (see silu_and_mul on layout)
        gate, up = F.linear(x[token], gate_up[e]).chunk(2, dim=-1)
        h = F.silu(gate) * up
        h = F.linear(h, down[e]) * weights[token, slot, None]
        out.index_add_(0, token, h)
    return out


# the routed arm's reach: the largest decode batch the runner captures (engine/runner.py GRAPH_BATCH_SIZES); past it
# (prefill) the reference's per-expert GEMMs over the tokens each expert drew cost less than every expert's
ROUTED_MAX_TOKENS = 256


def moe_experts_routed(
    x: torch.Tensor,  # x: [tokens, H]
    gate_up: torch.Tensor,  # gate_up: [E, 2*I, H], gate rows first, then up rows
    down: torch.Tensor,  # down: [E, H, I]
    weights: torch.Tensor,  # weights: [tokens, top_k], x.dtype
    ids: torch.Tensor,  # ids: [tokens, top_k] int, distinct per token, in [0, E)
) -> torch.Tensor:  # [tokens, H], x.dtype
    """`moe_experts` with no host read, so a CUDA graph can hold it: every shape depends on the tensors' shapes
    alone, never on which experts were drawn.

    Few tokens (2 * tokens * top_k <= E) gather each (token, slot)'s expert weights and run one GEMV each; more
    compute every expert on every token (one GEMM for gate_up, a batched one for down: each expert's weights read
    once) and keep each token's top_k rows. The roundings and the sum order are the reference's (each product,
    silu_and_mul and the routing-weight multiply round to x.dtype; a token's experts are added in ascending id
    from zero, each partial sum rounded to x.dtype); only the GEMMs' row counts differ from the reference's
    per-expert ones, and a GEMM's rounding may depend on its row count (CPU BLAS does), so the two agree
    bitwise where every GEMM is exact, and within the GEMMs' rounding otherwise. The ids are not checked
    (like the kernels'): an id outside [0, E) is an indexing error on the device."""
    tokens, top_k = ids.shape
    order = ids.sort(dim=-1).indices  # ascending expert id per token: the reference's sum order
    ids = ids.gather(1, order).long()
    weights = weights.gather(1, order)
    if 2 * tokens * top_k <= gate_up.shape[0]:  # the gather copies each drawn expert once: cheaper than all E
        h = _drawn_experts(x, gate_up, down, ids)
    else:
        h = _every_expert(x, gate_up, down, ids)
    h = h * weights[..., None]
    out = torch.zeros_like(x)
    for j in range(top_k):  # a static loop over slots, each add rounded to x.dtype as the reference's index_add_
        out = out + h[:, j]
    return out


def _drawn_experts(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """[tokens, top_k, H]: each (token, slot)'s expert output from that expert's weights alone."""
    tokens, top_k = ids.shape
    drawn = ids.reshape(-1)
    rows = x[:, None, :].expand(tokens, top_k, x.shape[1]).reshape(tokens * top_k, 1, x.shape[1])
    gate, up = torch.bmm(rows, gate_up.index_select(0, drawn).transpose(1, 2))[:, 0].chunk(2, dim=-1)
    h = F.silu(gate) * up  # [tokens * top_k, I], each row laid out as the reference's chunk
    return torch.bmm(h[:, None, :], down.index_select(0, drawn).transpose(1, 2)).view(tokens, top_k, -1)


def _every_expert(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """[tokens, top_k, H]: every expert on every token, then each token's drawn experts' rows."""
    num_experts, two_inter, hidden = gate_up.shape
    gate, up = (
        F.linear(x, gate_up.reshape(num_experts * two_inter, hidden)).view(-1, num_experts, two_inter).chunk(2, -1)
    )
    h = F.silu(gate) * up  # [tokens, E, I]
    out = torch.bmm(h.transpose(0, 1), down.transpose(1, 2)).transpose(0, 1)  # [tokens, E, H]
    return out.gather(1, ids[..., None].expand(-1, -1, hidden))


def check_moe_experts(
    x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor
) -> None:
    check_tensor(x, "x", ndim=2, dtypes=FLOAT_DTYPES)
    check_tensor(gate_up, "gate_up", ndim=3)
    check_tensor(down, "down", ndim=3)
    check_tensor(weights, "weights", ndim=2)
    check_tensor(ids, "ids", ndim=2, dtypes=INDEX_DTYPES)
    for name, t in (("gate_up", gate_up), ("down", down), ("weights", weights)):
        check_same_dtype(t, name, x, "x")
    num_experts, two_inter, hidden = gate_up.shape
    if two_inter % 2:
        raise ValueError(f"gate_up: dim 1 must be 2*I, got {two_inter}")
    check_dim(gate_up, "gate_up", 2, x.shape[1], "x's hidden")
    check_dim(down, "down", 0, num_experts, "gate_up's experts")
    check_dim(down, "down", 1, hidden, "x's hidden")
    check_dim(down, "down", 2, two_inter // 2, "gate_up's I")
    check_dim(weights, "weights", 0, x.shape[0], "x's tokens")
    if ids.shape != weights.shape:
        raise ValueError(f"ids: shape {tuple(ids.shape)} != weights' {tuple(weights.shape)}")
