"""Numerics cases for the varlen prefill/extend attention arms (VT_PREFILL_ATTN) against the eager reference.

Each case is one step's batch of sequences, each its new tokens over a cached prefix (extend) or a whole
prompt (prefill): lengths that straddle the kernel's 64-row query tiles and 64-key (32 at head_dim 256)
key tiles and the cache's blocks, odd sizes (7, 19, 83, 111), a one-token row (a decode row of a mixed
step), prefixes up to 1000, query rows strided as the fused q/k/v projection leaves them, GQA groups 1 to 8,
head_dim 32 (the embedded tiny model) to 256, and sliding windows shorter and longer than the chunks.

Tolerances are the decode attention arms' (numerics.TOLERANCES by dtype): the kernel rounds scores and
probabilities where the reference does, so what differs is the fp32 summation order inside q.k and P.V
(tensor-core order, not cuBLAS's) and of the softmax sum; either can move a rounded score or probability by
one ulp of the dtype, and the output of a few elements by about one ulp (bf16: 2^-8 relative; inputs are
standard normal, outputs O(1), so the bf16 bound 1.6e-2 is about two ulps).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch

from engine import kernels
from engine.ops import paged_attn as ref
from lab.gates.cases import Inputs, KernelCase

ROW = "ENGINE-GATE-REACH"
FLAG = "VT_PREFILL_ATTN"
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# (new tokens, cached prefix) per sequence: one step's batch
MIXED = ((1, 0), (7, 0), (19, 33), (64, 0), (65, 64), (83, 100), (1, 685), (111, 19), (128, 1000), (33, 31))
PREFILLS = (1, 7, 19, 63, 64, 65, 83, 111, 128, 200)
NUM_KV_HEADS = 2


def varlen_inputs(
    seed: int,
    device: torch.device,
    *,
    dtype: torch.dtype,
    rows: tuple[tuple[int, int], ...],
    d: int,
    group: int,
    block_size: int,
    window: int | None,
    strided: bool,
) -> Inputs:
    """A random paged cache holding every row's prefix and new tokens in shuffled blocks (plus one spare
    table column); q packed back to back, as a view into a wider q/k/v row when `strided`."""
    g = torch.Generator().manual_seed(seed)
    lens, pres = [n for n, _ in rows], [p for _, p in rows]
    need = [math.ceil((n + p) / block_size) for n, p in rows]
    max_blocks = max(need) + 1
    num_blocks = sum(need) + 3
    perm = torch.randperm(num_blocks, generator=g)
    tables = torch.randint(0, num_blocks, (len(rows), max_blocks), generator=g, dtype=torch.int32)
    start = 0
    for b, n in enumerate(need):
        tables[b, :n] = perm[start : start + n].to(torch.int32)
        start += n
    shape = (num_blocks, block_size, NUM_KV_HEADS, d)
    tokens, hq = sum(lens), NUM_KV_HEADS * group
    width = hq * d + (2 * NUM_KV_HEADS * d if strided else 0)
    qkv = torch.randn(tokens, width, generator=g).to(dtype).to(device)
    # prefill: the new tokens' own K/V, contiguous (each row's prefix is then ignored)
    k = torch.randn(tokens, NUM_KV_HEADS, d, generator=g).to(dtype)
    v = torch.randn(tokens, NUM_KV_HEADS, d, generator=g).to(dtype)
    return {
        "q": qkv[:, : hq * d].view(tokens, hq, d),
        "k": k.to(device),
        "v": v.to(device),
        "k_cache": torch.randn(*shape, generator=g).to(dtype).to(device),
        "v_cache": torch.randn(*shape, generator=g).to(dtype).to(device),
        "block_tables": tables.to(device),
        "seq_lens": lens,
        "prefix_lens": pres,
        "device_lens": torch.tensor([lens, pres], dtype=torch.int32, device=device),
        "scale": 1.0 / math.sqrt(d),
        "window": window,
    }


def run_extend(arm: str, x: Inputs) -> torch.Tensor:
    return kernels.extend_attention.run_arm(
        arm,
        x["q"],
        x["k_cache"],
        x["v_cache"],
        x["block_tables"],
        x["seq_lens"],
        x["prefix_lens"],
        x["scale"],
        x["window"],
        device_lens=x["device_lens"],
    )


def ref_extend(x: Inputs) -> torch.Tensor:
    return ref.extend_attention(
        x["q"], x["k_cache"], x["v_cache"], x["block_tables"], x["seq_lens"], x["prefix_lens"], x["scale"], x["window"]
    )


def run_prefill(x: Inputs) -> torch.Tensor:
    lens = x["device_lens"][:1]
    return kernels.prefill_attention.run_arm(
        "mma", x["q"], x["k"], x["v"], x["seq_lens"], x["scale"], x["window"], device_lens=lens
    )


def ref_prefill(x: Inputs) -> torch.Tensor:
    return ref.prefill_attention(x["q"], x["k"], x["v"], x["seq_lens"], x["scale"], x["window"])


def case(
    op: str,
    arm: str,
    dt: str,
    d: int,
    group: int,
    bs: int,
    window: int | None = None,
    strided: bool = False,
    rows: tuple[tuple[int, int], ...] = MIXED,
    tags: tuple[str, ...] = (),
) -> KernelCase:
    name = (
        f"prefill/{op}-{arm}/{dt}/d{d}/g{group}/bs{bs}"
        + (f"/w{window}" if window else "")
        + ("/strided" if strided else "")
        + (f"/rows{len(rows)}" if rows not in (MIXED,) else "")
    )
    dtype = DTYPES[dt]
    make = partial(
        varlen_inputs, dtype=dtype, rows=rows, d=d, group=group, block_size=bs, window=window, strided=strided
    )
    kernel: Callable[[Inputs], torch.Tensor] = partial(run_extend, arm) if op == "extend" else run_prefill
    reference = ref_extend if op == "extend" else ref_prefill
    return KernelCase(name, f"{op}_{arm}", FLAG, dtype, make, kernel, reference, dt, ROW, tags)


def build_cases() -> list[KernelCase]:
    cases: list[KernelCase] = []
    prompts = tuple((n, 0) for n in PREFILLS)
    for dt in ("bf16", "fp16"):
        for d in (32, 64, 128, 256):
            for group in (1, 2, 3, 8):
                cases.append(case("extend", "mma", dt, d, group, 16, tags=("small",) if d == 64 and group == 2 else ()))
            cases.append(case("prefill", "mma", dt, d, 2, 16, rows=prompts))
        cases.append(case("extend", "mma", dt, 128, 2, 32, strided=True))  # Qwen3-0.6B's group, fused q/k/v rows
        cases.append(case("prefill", "mma", dt, 128, 2, 16, strided=True, rows=prompts))
        for window in (1, 50, 100, 4096):
            cases.append(case("extend", "mma", dt, 128, 4, 16, window=window))
            cases.append(case("prefill", "mma", dt, 64, 4, 16, window=window, rows=prompts))
        cases.append(case("extend", "mma", dt, 128, 2, 48, rows=((300, 1700), (2048, 0), (5, 3000))))  # long rows
    for d in (32, 128, 256):  # fp32: one generic decode row per new token
        for group in (1, 3):
            cases.append(case("extend", "decode_rows", "fp32", d, group, 16))
    cases.append(case("extend", "decode_rows", "fp32", 128, 2, 16, window=50, strided=True))
    cases.append(case("extend", "decode_rows", "bf16", 128, 2, 16))
    return cases


CASES = build_cases()
