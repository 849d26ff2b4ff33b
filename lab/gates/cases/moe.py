"""Numerics cases for the MoE kernels: routing, token-to-expert alignment and the grouped expert GEMMs."""

from __future__ import annotations

from functools import partial

import torch

from engine.cuda import moe
from engine.ops import moe as ref_moe
from lab.gates.cases import Inputs, KernelCase

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
ROUTE_SHAPES = ((1, 128, 8), (7, 60, 4), (83, 128, 8), (33, 512, 10))  # (tokens, experts, top_k)
# (tokens, hidden, inter, experts, top_k): decode batches, a Qwen3-MoE-like slice, and odd sizes
EXPERT_SHAPES = ((1, 256, 96, 16, 4), (7, 96, 40, 9, 3), (33, 83, 19, 5, 2), (64, 512, 256, 32, 8))
ALIGN_BLOCK = 16


def distinct_logits(tokens: int, experts: int, g: torch.Generator) -> torch.Tensor:
    """[tokens, experts] fp32 logits, distinct within a row and exact in bf16 (multiples of 1/16, |x| <= 16 for
    up to 512 experts): torch.topk leaves the order of equal probabilities unspecified, so ties are tested apart."""
    rows = [torch.randperm(experts, generator=g) for _ in range(tokens)]
    return (torch.stack(rows) - experts // 2).float() / 16


def route_inputs(
    seed: int, device: torch.device, *, tokens: int, experts: int, top_k: int, dtype: torch.dtype
) -> Inputs:
    g = torch.Generator().manual_seed(seed)
    return {"logits": distinct_logits(tokens, experts, g).to(dtype).to(device), "top_k": top_k, "dtype": dtype}


def dense_routing(weights: torch.Tensor, ids: torch.Tensor, experts: int) -> torch.Tensor:
    """[tokens, experts] with each token's weights at its expert ids: a wrong id or weight shows as a difference."""
    return torch.zeros(ids.shape[0], experts, dtype=weights.dtype, device=weights.device).scatter(1, ids, weights)


def route_kernel(x: Inputs, renormalize: bool) -> torch.Tensor:
    w, ids = moe.route(x["logits"], x["top_k"], renormalize, x["dtype"])
    return dense_routing(w, ids, x["logits"].shape[1])


def route_reference(x: Inputs, renormalize: bool) -> torch.Tensor:
    w, ids = ref_moe.moe_route(x["logits"], x["top_k"], renormalize, x["dtype"])
    return dense_routing(w, ids, x["logits"].shape[1])


def align_inputs(seed: int, device: torch.device, *, tokens: int, experts: int, top_k: int) -> Inputs:
    g = torch.Generator().manual_seed(seed)
    ids = torch.stack([torch.randperm(experts, generator=g)[:top_k] for _ in range(tokens)])
    return {"ids": ids.to(device), "experts": experts}


def align_kernel(x: Inputs) -> torch.Tensor:
    al = moe.align(x["ids"], x["experts"], ALIGN_BLOCK)
    return torch.cat([al.sorted_ids, al.block_expert, al.offsets]).float()


def align_reference(x: Inputs) -> torch.Tensor:
    """Stable sort of the flat slots by expert, each expert's run padded with numel to a block multiple."""
    flat = x["ids"].flatten()
    numel, experts, dev = flat.numel(), x["experts"], flat.device
    counts = torch.bincount(flat, minlength=experts)
    padded = (counts + ALIGN_BLOCK - 1) // ALIGN_BLOCK * ALIGN_BLOCK
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64, device=dev), padded.cumsum(0)])
    capacity = -(-(numel + experts * (ALIGN_BLOCK - 1)) // ALIGN_BLOCK) * ALIGN_BLOCK
    order = torch.sort(flat, stable=True).indices
    sorted_e = flat[order]
    rank = torch.arange(numel, device=dev) - (counts.cumsum(0) - counts)[sorted_e]  # place within its expert
    rows = torch.full((capacity,), numel, dtype=torch.int64, device=dev)
    rows[offsets[sorted_e] + rank] = order
    starts = torch.arange(0, capacity, ALIGN_BLOCK, device=dev)
    owner = torch.searchsorted(offsets[1:], starts, right=True)
    owner = torch.where(starts < offsets[-1], owner, torch.full_like(owner, -1))
    return torch.cat([rows, owner, offsets]).float()


def expert_inputs(
    seed: int,
    device: torch.device,
    *,
    tokens: int,
    hidden: int,
    inter: int,
    experts: int,
    top_k: int,
    dtype: torch.dtype,
) -> Inputs:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=g)
    gate_up = torch.randn(experts, 2 * inter, hidden, generator=g) / hidden**0.5
    down = torch.randn(experts, hidden, inter, generator=g) / inter**0.5
    w, ids = ref_moe.moe_route(torch.randn(tokens, experts, generator=g), top_k, True, dtype)
    return {
        k: v.to(dtype).to(device) if v.is_floating_point() else v.to(device)
        for k, v in {"x": x, "gate_up": gate_up, "down": down, "weights": w, "ids": ids}.items()
    }


def experts_kernel(x: Inputs) -> torch.Tensor:
    return moe.experts(x["x"], x["gate_up"], x["down"], x["weights"], x["ids"])


def experts_reference(x: Inputs) -> torch.Tensor:
    return ref_moe.moe_experts(x["x"], x["gate_up"], x["down"], x["weights"], x["ids"])


def _cases() -> list[KernelCase]:
    cases = []
    for dname, dtype in DTYPES.items():
        for i, (t, e, k) in enumerate(ROUTE_SHAPES):
            for renorm in (False, True):
                cases.append(
                    KernelCase(
                        name=f"moe/route/{dname}/t{t}-e{e}-k{k}{'-renorm' if renorm else ''}",
                        arm="route",
                        flag="VT_MOE_KERNELS",
                        dtype=dtype,
                        make=partial(route_inputs, tokens=t, experts=e, top_k=k, dtype=dtype),
                        kernel=partial(route_kernel, renormalize=renorm),
                        reference=partial(route_reference, renormalize=renorm),
                        tolerance=dname,
                        row="KERNEL-MOE",
                        tags=("small",) if i == 1 else (),
                    )
                )
        for i, (t, h, n, e, k) in enumerate(EXPERT_SHAPES):
            cases.append(
                KernelCase(
                    name=f"moe/experts/{dname}/t{t}-h{h}-i{n}-e{e}-k{k}",
                    arm="grouped-gemm",
                    flag="VT_MOE_KERNELS",
                    dtype=dtype,
                    make=partial(expert_inputs, tokens=t, hidden=h, inter=n, experts=e, top_k=k, dtype=dtype),
                    kernel=experts_kernel,
                    reference=experts_reference,
                    tolerance=dname,
                    row="KERNEL-MOE",
                    tags=("small",) if i == 1 else (),
                )
            )
    for i, (t, e, k) in enumerate(((7, 5, 2), (83, 128, 8), (300, 19, 3))):
        cases.append(
            KernelCase(
                name=f"moe/align/int32/t{t}-e{e}-k{k}",
                arm="align",
                flag="VT_MOE_KERNELS",
                dtype=torch.float32,
                make=partial(align_inputs, tokens=t, experts=e, top_k=k),
                kernel=align_kernel,
                reference=align_reference,
                tolerance="exact",
                row="KERNEL-MOE",
                tags=("small",) if i == 0 else (),
            )
        )
    return cases


CASES: list[KernelCase] = _cases()
