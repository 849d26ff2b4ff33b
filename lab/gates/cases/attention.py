"""Numerics cases for the paged KV store and the paged decode attention arms: the chain's (generic, tiled and its
variants) and the by-name arms (split-KV with the GQA group swap, warp-split-KV at head_dim 128), which run through
the kernel table by name (`Op.run_arm`) as a gate or A/B reaches them."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch

from engine import kernels
from engine.cuda import kv_store, paged_attn, paged_attn_onepass, paged_attn_tiled, splitkv
from engine.ops import kv_store as ref_kv
from engine.ops import paged_attn as ref_attn
from engine.ops import splitkv as ref_split
from lab.gates.cases import Inputs, KernelCase
from lab.gates.tokens import RAZOR_PROMPT_LENS

CONTEXTS = (1, 31, 32, 33, 64, 100, 685, 1000)  # straddle the 32-token block boundaries
LONG_CONTEXTS = (4096, 32768)
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
NUM_KV_HEADS = 2
FORCED_SPLITS = 7  # more splits than some contexts have blocks: empty splits must weigh zero


def paged_inputs(
    seed: int,
    device: torch.device,
    *,
    dtype: torch.dtype,
    ctx: int,
    d: int,
    group: int,
    block_size: int,
    window: int | None,
) -> Inputs:
    """Batch of 3 (lengths ctx, ~ctx/3, ~2ctx/3) over shuffled blocks of a random cache; made on the CPU."""
    g = torch.Generator().manual_seed(seed)
    lens = [ctx, max(1, ctx // 3), max(1, (2 * ctx) // 3)]
    need = [math.ceil(n / block_size) for n in lens]
    max_blocks = max(need) + 1  # one spare column: the kernels must not read past a sequence's blocks
    num_blocks = sum(need) + 3
    perm = torch.randperm(num_blocks, generator=g)
    tables = torch.randint(0, num_blocks, (len(lens), max_blocks), generator=g, dtype=torch.int32)
    start = 0
    for b, n in enumerate(need):
        tables[b, :n] = perm[start : start + n].to(torch.int32)
        start += n
    shape = (num_blocks, block_size, NUM_KV_HEADS, d)
    return {
        "q": torch.randn(len(lens), NUM_KV_HEADS * group, d, generator=g).to(dtype).to(device),
        "k_cache": torch.randn(*shape, generator=g).to(dtype).to(device),
        "v_cache": torch.randn(*shape, generator=g).to(dtype).to(device),
        "block_tables": tables.to(device),
        "context_lens": torch.tensor(lens, dtype=torch.int32, device=device),
        "scale": 1.0 / math.sqrt(d),
        "window": window,
    }


def _args(x: Inputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float]:
    """The six leading arguments every paged decode arm shares: q, the caches, tables, lens and scale."""
    return x["q"], x["k_cache"], x["v_cache"], x["block_tables"], x["context_lens"], x["scale"]


def run_arm(arm: str, x: Inputs) -> torch.Tensor:
    """The binding's arm (the generic kernel); a by-name arm of the table runs through `run_by_name`."""
    return paged_attn.paged_decode_attention(*_args(x), x["window"], arm=paged_attn.ARMS[arm])


def run_by_name(arm: str, x: Inputs) -> torch.Tensor:
    """A by-name arm through the kernel table, as a gate or an A/B names it (the default order never takes it)."""
    return kernels.paged_decode_attention.run_arm(arm, *_args(x), x["window"])


def run_splitkv_swap(splits: int | None, x: Inputs) -> torch.Tensor:
    if splits is None:
        return run_by_name("splitkv_swap", x)
    o_part, lse = splitkv.partial(*_args(x), splits, x["window"])
    return splitkv.combine(o_part, lse, x["q"].dtype)


def run_tiled(splits: int | None, x: Inputs) -> torch.Tensor:
    return paged_attn_tiled.decode(*_args(x), x["window"], splits=splits)


def run_tiled_fused(splits: int, x: Inputs) -> torch.Tensor:
    out = paged_attn_tiled.decode_fused(*_args(x), x["window"], splits)  # required: raises where it does not fit
    assert out is not None
    return out


def run_tiled_pipelined(splits: int, x: Inputs) -> torch.Tensor:
    """The pipelined P.V pass with its split sum folded (the counters are made outside graph capture here)."""
    return paged_attn_tiled.decode(*_args(x), x["window"], splits=splits, pipelined=True)


def run_tiled_pipelined_pdl(splits: int, x: Inputs) -> torch.Tensor:
    """The same with its P.V pass a programmatic dependent of the scores pass (VT_ATTN_PDL)."""
    return paged_attn_tiled.decode(*_args(x), x["window"], splits=splits, pipelined=True, pdl=True)


def run_tiled_two_pass(splits: int | None, x: Inputs) -> torch.Tensor:
    """The default tiled arm, two passes: the fused and pipelined arms must equal it bit for bit."""
    return paged_attn_tiled.decode(*_args(x), x["window"], splits=splits, fused=False)


def run_onepass(splits: int | None, x: Inputs) -> torch.Tensor:
    return paged_attn_onepass.decode(*_args(x), x["window"], splits=splits)


def ref_eager(x: Inputs) -> torch.Tensor:
    return ref_attn.paged_decode_attention(*_args(x), x["window"])


def ref_splitkv(splits: int | None, x: Inputs) -> torch.Tensor:
    if splits is None:  # the split count the kernel's heuristic picks for this shape
        q = x["q"]
        sms = splitkv.sm_count(q.device)  # the cached device probe, as decode reads it
        rows = q.shape[0] * x["k_cache"].shape[2]  # the group swap: one block per (sequence, KV head)
        splits = splitkv.num_splits(rows, splitkv.capacity(x["block_tables"], x["k_cache"]), sms)  # as decode sizes it
    out, lse = ref_split.splitkv_partial(*_args(x), splits, x["window"])
    return ref_split.splitkv_combine(out, lse, x["q"].dtype)


def ref_fp32(x: Inputs) -> torch.Tensor:
    """Attention with fp32 scores and probabilities, rounded once at the output (the split-KV reference with one
    split): what an online-softmax kernel approximates."""
    out, lse = ref_split.splitkv_partial(*_args(x), 1, x["window"])
    return ref_split.splitkv_combine(out, lse, x["q"].dtype)


def run_splitkv_partial(x: Inputs) -> torch.Tensor:
    return splitkv.partial(*_args(x), FORCED_SPLITS, x["window"])[0]


def ref_splitkv_partial(x: Inputs) -> torch.Tensor:
    return ref_split.splitkv_partial(*_args(x), FORCED_SPLITS, x["window"])[0]


ARMS = {  # arm -> (flag, row); the by-name arms have no flag
    "generic": (None, "KERNEL-ATTN-PAGED"),
    "warp_d128": (None, "KERNEL-ATTN-PAGED"),
    "splitkv_swap": (None, "KERNEL-ATTN-SPLITKV"),
    "tiled": ("VT_ATTN_TILED", "KERNEL-ATTN-PAGED"),
    "tiled_fused": ("VT_ATTN_TILED_FUSED", "ENGINE-PERF"),
    "tiled_pipelined": ("VT_ATTN_PV_PIPELINED", "ENGINE-PERF"),
    "tiled_pipelined_pdl": ("VT_ATTN_PDL", "ENGINE-PERF"),
    "tiled_onepass": ("VT_ATTN_ONEPASS", "ENGINE-PERF"),
}
TILED_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


BY_NAME = ("splitkv_swap", "warp_d128")  # the table's by-name arms (engine/kernels/attention.py)


def supports(arm: str, d: int, group: int) -> bool:
    if arm == "warp_d128":
        return d == 128
    if arm == "splitkv_swap":
        return splitkv.supports(d, group, torch.bfloat16)
    return True


def attn_case(
    arm: str,
    dt: str,
    d: int,
    group: int,
    bs: int,
    ctx: int,
    window: int | None = None,
    splits: int | None = None,
    tags: tuple[str, ...] = (),
) -> KernelCase:
    flag, row = ARMS[arm]
    name = (
        f"attn/{arm}/{dt}/d{d}/g{group}/bs{bs}/ctx{ctx}"
        + (f"/w{window}" if window else "")
        + (f"/s{splits}" if splits else "")
    )
    dtype = (TILED_DTYPES if arm.startswith("tiled") else DTYPES)[dt]
    make = partial(paged_inputs, dtype=dtype, ctx=ctx, d=d, group=group, block_size=bs, window=window)
    if arm == "tiled":
        kernel, reference = partial(run_tiled, splits), ref_eager
    elif arm == "splitkv_swap":
        kernel, reference = partial(run_splitkv_swap, splits), partial(ref_splitkv, splits)
    elif arm in BY_NAME:
        kernel, reference = partial(run_by_name, arm), ref_eager
    else:
        kernel, reference = partial(run_arm, arm), ref_eager
    return KernelCase(name, arm, flag, dtype, make, kernel, reference, dt, row, tags)


def kv_inputs(seed: int, device: torch.device, *, dtype: torch.dtype, d: int, bs: int) -> Inputs:
    g = torch.Generator().manual_seed(seed)
    tokens, num_blocks = 37, 11
    slots = torch.randperm(num_blocks * bs, generator=g)[:tokens]
    slots[torch.randperm(tokens, generator=g)[:5]] = -1  # padding tokens
    cache = (num_blocks, bs, NUM_KV_HEADS, d)
    return {
        "k": torch.randn(tokens, NUM_KV_HEADS, d, generator=g).to(dtype).to(device),
        "v": torch.randn(tokens, NUM_KV_HEADS, d, generator=g).to(dtype).to(device),
        "k_cache": torch.randn(*cache, generator=g).to(dtype).to(device),
        "v_cache": torch.randn(*cache, generator=g).to(dtype).to(device),
        "slots": slots.to(device),
    }


def run_kv(x: Inputs) -> torch.Tensor:
    kc, vc = x["k_cache"].clone(), x["v_cache"].clone()
    kv_store.store_kv(x["k"], x["v"], kc, vc, x["slots"])
    return torch.stack([kc, vc])


def ref_kv_store(x: Inputs) -> torch.Tensor:
    kc, vc = x["k_cache"].clone(), x["v_cache"].clone()
    ref_kv.store_kv(x["k"], x["v"], kc, vc, x["slots"])
    return torch.stack([kc, vc])


def tiled_cases() -> list[KernelCase]:
    """The tiled arm (bf16 and fp16 only): every context, a shape sweep with odd groups and block sizes that
    straddle its 64-token tiles, windows, and forced split counts with empty splits."""
    cases = []
    for dt in TILED_DTYPES:
        for ctx in CONTEXTS:
            cases.append(attn_case("tiled", dt, 128, 4, 32, ctx, tags=("small",) if ctx == 33 else ()))
        for ctx in LONG_CONTEXTS:
            cases.append(attn_case("tiled", dt, 128, 4, 32, ctx, tags=("long",)))
        for d in (64, 128, 256):
            for group in (1, 2, 3, 8):
                for bs in (16, 32):
                    cases.append(attn_case("tiled", dt, d, group, bs, 100))
        cases.append(attn_case("tiled", dt, 128, 4, 16, 685, window=256))
        cases.append(attn_case("tiled", dt, 128, 4, 32, 100, window=1000))
        cases.append(attn_case("tiled", dt, 256, 8, 32, 1000, window=100))
    cases.append(attn_case("tiled", "bf16", 128, 5, 48, 685))  # a block size that does not divide a tile
    for ctx in (1, 100, 685, 4096):
        for splits in (1, FORCED_SPLITS, 64):
            cases.append(attn_case("tiled", "bf16", 128, 4, 32, ctx, splits=splits))
    return cases


# The `long` gate model's decode (lab/data/gate_models.py), where the reach gate saw the tiled arm's one
# 0.75-nat choice: 16 sequences, the razor's prompts plus 1536 tokens and 38 decoded (1580 is that position's
# context), 8/2 heads, head_dim 128, 16-token blocks, tables of 104 blocks (the runner's 1664 positions: 13
# splits of 2 tiles on the H200), the full layers and the 40-token window layer. "sharp": q and k at twice
# the scale, as the gate models' q/k norms (make_tiny.QK_NORM_SCALE) make them.
LONG_GATE_LENS = tuple(1536 + 38 + n for n in RAZOR_PROMPT_LENS)
LONG_GATE_BLOCKS = 104


def long_gate_inputs(seed: int, device: torch.device, *, window: int | None, sharp: bool) -> Inputs:
    g = torch.Generator().manual_seed(seed)
    bs, hkv, group, d = 16, 2, 4, 128
    need = [math.ceil(n / bs) for n in LONG_GATE_LENS]
    num_blocks = sum(need) + 3
    perm = torch.randperm(num_blocks, generator=g)
    tables = torch.randint(0, num_blocks, (len(need), LONG_GATE_BLOCKS), generator=g, dtype=torch.int32)
    start = 0
    for b, n in enumerate(need):
        tables[b, :n] = perm[start : start + n].to(torch.int32)
        start += n
    amp = 2.0 if sharp else 1.0
    shape = (num_blocks, bs, hkv, d)
    return {
        "q": (amp * torch.randn(len(need), hkv * group, d, generator=g)).to(torch.bfloat16).to(device),
        "k_cache": (amp * torch.randn(*shape, generator=g)).to(torch.bfloat16).to(device),
        "v_cache": torch.randn(*shape, generator=g).to(torch.bfloat16).to(device),
        "block_tables": tables.to(device),
        "context_lens": torch.tensor(LONG_GATE_LENS, dtype=torch.int32, device=device),
        "scale": 1.0 / math.sqrt(d),
        "window": window,
    }


def ref_exact_sums(x: Inputs) -> torch.Tensor:
    """The eager reference's five rounding points with the sums between them exact (fp64): what the eager
    reference (cuBLAS on the GPU, the oracle's arithmetic) and every arm approximate, each in its own order."""
    q, k_cache, v_cache, tables, lens, scale = _args(x)
    k_flat, v_flat = ref_attn.check_paged(q, k_cache, v_cache, tables, lens)
    scale32 = torch.tensor(scale, dtype=torch.float32).double()  # eager multiplies by the fp32 scale
    out = torch.empty_like(q)
    for b in range(q.shape[0]):
        n = int(lens[b])
        k, v = ref_attn.gather_sequence(k_flat, v_flat, tables[b], n, k_cache.shape[1])
        lo = max(0, n - x["window"]) if x["window"] else 0
        group = q.shape[1] // k.shape[1]
        kh = k[lo:].transpose(0, 1).repeat_interleave(group, dim=0).double()  # [Hq, n, D]
        vh = v[lo:].transpose(0, 1).repeat_interleave(group, dim=0).double()
        s = torch.einsum("hd,hnd->hn", q[b].double(), kh).to(q.dtype)  # point 1
        s = (s.double() * scale32).to(q.dtype)  # point 2
        p = torch.softmax(s.double(), dim=-1).to(q.dtype)  # points 3 and 4
        out[b] = torch.einsum("hn,hnd->hd", p.double(), vh).to(q.dtype)  # point 5
    return out


def long_gate_cases() -> list[KernelCase]:
    """The tiled arm on the `long` gate model's decode shape: against the eager reference at its own split count,
    one split, 13 (the H200's) and 26 (one tile each); 13 splits against one (only the fp32 order of the partial
    sums differs); and the tiled arm and the eager reference (on the GPU: cuBLAS, the oracle's arithmetic) each
    against the exact-sum reference, so their bitwise-equal shares compare which is nearer to exact."""
    cases = []
    for window in (None, 40):
        for sharp in (False, True):
            make = partial(long_gate_inputs, window=window, sharp=sharp)
            shape = "bf16/d128/g4/bs16/long-gate" + (f"/w{window}" if window else "") + ("/sharp" if sharp else "")
            for splits in (None, 1, 13, 26):
                name = f"attn/tiled/{shape}" + (f"/s{splits}" if splits else "")
                cases.append(
                    KernelCase(
                        name,
                        "tiled",
                        "VT_ATTN_TILED",
                        torch.bfloat16,
                        make,
                        partial(run_tiled, splits),
                        ref_eager,
                        "bf16",
                        "KERNEL-ATTN-PAGED",
                        ("long-gate",),
                    )
                )
            cases.append(
                KernelCase(
                    f"attn/tiled-s13-vs-s1/{shape}",
                    "tiled",
                    "VT_ATTN_TILED",
                    torch.bfloat16,
                    make,
                    partial(run_tiled, 13),
                    partial(run_tiled, 1),
                    "bf16",
                    "KERNEL-ATTN-PAGED",
                    ("long-gate",),
                )
            )
            cases.append(
                KernelCase(
                    f"attn/tiled-vs-exact/{shape}",
                    "tiled",
                    "VT_ATTN_TILED",
                    torch.bfloat16,
                    make,
                    partial(run_tiled, None),
                    ref_exact_sums,
                    "bf16",
                    "KERNEL-ATTN-PAGED",
                    ("long-gate",),
                )
            )
            cases.append(
                KernelCase(
                    f"attn/eager-vs-exact/{shape}",
                    "eager",
                    None,
                    torch.bfloat16,
                    make,
                    ref_eager,
                    ref_exact_sums,
                    "bf16",
                    "KERNEL-ATTN-PAGED",
                    ("long-gate",),
                )
            )
    return cases


def bitwise_tiled_cases(arm: str, run: Callable[[int, Inputs], torch.Tensor], min_splits: int) -> list[KernelCase]:
    """An arm that must equal the two-pass tiled arm bit for bit ("exact"), and the eager reference on a few:
    every context, both dtypes, head_dim 64/128/256, odd groups and block sizes, windows, and split counts of
    `min_splits`, 2, 7 (more than some contexts have tiles: empty splits) and 64. `run(splits, inputs)`."""
    cases = []
    flag, row = ARMS[arm]

    def add(
        dt: str,
        d: int,
        group: int,
        bs: int,
        ctx: int,
        window: int | None = None,
        splits: int = FORCED_SPLITS,
        tags: tuple[str, ...] = (),
    ) -> None:
        base = attn_case(arm, dt, d, group, bs, ctx, window, splits, tags)
        cases.append(
            KernelCase(
                base.name,
                base.arm,
                base.flag,
                base.dtype,
                base.make,
                partial(run, splits),
                partial(run_tiled_two_pass, splits),
                "exact",
                base.row,
                base.tags,
            )
        )

    for dt in TILED_DTYPES:
        for ctx in CONTEXTS + LONG_CONTEXTS:
            add(dt, 128, 4, 32, ctx, tags=("small",) if ctx == 33 else ("long",) if ctx in LONG_CONTEXTS else ())
        for d in (64, 128, 256):
            for group in (1, 3, 8):
                add(dt, d, group, 16, 100)
        add(dt, 128, 4, 16, 685, window=256)
        add(dt, 256, 8, 32, 1000, window=100)
    add("bf16", 128, 5, 48, 685)
    for ctx in (1, 100, 685, 4096, 32768):
        for splits in sorted({min_splits, 2, 64}):
            add("bf16", 128, 4, 32, ctx, splits=splits)
    for ctx in (33, 1000, 4096):  # and against the reference itself
        cases.append(
            KernelCase(
                f"attn/{arm}-vs-ref/bf16/d128/g4/bs32/ctx{ctx}/s{FORCED_SPLITS}",
                arm,
                flag,
                torch.bfloat16,
                partial(paged_inputs, dtype=torch.bfloat16, ctx=ctx, d=128, group=4, block_size=32, window=None),
                partial(run, FORCED_SPLITS),
                ref_eager,
                "bf16",
                row,
            )
        )
    return cases


def onepass_cases() -> list[KernelCase]:
    """The one-pass arm (bf16 and fp16, head_dim 64, 128 and 256) against the fp32 reference (its rounding is an
    online softmax's, not the eager reference's): every context, odd groups and block sizes, windows, split counts
    1, 2, 7 (empty splits) and 64 up to context 32768; three cases against the eager reference itself; and the
    `long` gate model's decode shape, plain and sharp. Head_dim 256 (K and V in separate stages, Q in shared
    memory) has its own contexts around the tile and block edges up to 5000, windows, splits and an eager case."""
    cases = []
    flag, row = ARMS["tiled_onepass"]

    def add(
        dt: str,
        d: int,
        group: int,
        bs: int,
        ctx: int,
        window: int | None = None,
        splits: int | None = None,
        tags: tuple[str, ...] = (),
        reference: Callable[[Inputs], torch.Tensor] = ref_fp32,
        suffix: str = "",
    ) -> None:
        base = attn_case("tiled_onepass", dt, d, group, bs, ctx, window, splits, tags)
        name = base.name.replace("attn/tiled_onepass/", f"attn/tiled_onepass{suffix}/")
        cases.append(
            KernelCase(
                name, base.arm, flag, base.dtype, base.make, partial(run_onepass, splits), reference, dt, row, base.tags
            )
        )

    for dt in TILED_DTYPES:
        for ctx in CONTEXTS + LONG_CONTEXTS:
            add(dt, 128, 4, 32, ctx, tags=("small",) if ctx == 33 else ("long",) if ctx in LONG_CONTEXTS else ())
        for d in paged_attn_onepass.HEAD_DIMS:
            for group in (1, 2, 3, 8):
                for bs in (16, 32):
                    add(dt, d, group, bs, 100)
        add(dt, 128, 4, 16, 685, window=256)
        add(dt, 128, 4, 32, 100, window=1000)
        add(dt, 128, 8, 32, 1000, window=100)
    add("bf16", 128, 5, 48, 685)  # a block size that does not divide a tile
    for ctx in (1, 100, 685, 4096, 32768):
        for splits in (1, 2, FORCED_SPLITS, 64):
            add("bf16", 128, 4, 32, ctx, splits=splits, tags=("long",) if ctx == 32768 else ())
    for ctx in (33, 1000, 4096):  # and against the eager reference, within its bf16 tolerance
        add("bf16", 128, 4, 32, ctx, splits=FORCED_SPLITS, reference=ref_eager, suffix="-vs-eager")
    for dt in TILED_DTYPES:  # head_dim 256: a tile's K and V are two pipeline units, so odd unit counts matter
        for ctx in (1, 31, 32, 33, 65, 1000, 5000):
            add(dt, 256, 4, 32, ctx, tags=("small",) if ctx == 33 else ())
        add(dt, 256, 8, 16, 685, window=256)
        add(dt, 256, 2, 32, 5000, window=1000)
        add(dt, 256, 1, 16, 5000, window=100)
    add("bf16", 256, 5, 48, 685)  # a block size that does not divide a tile
    for ctx in (33, 1000, 5000):
        for splits in (1, 2, FORCED_SPLITS, 64):
            add("bf16", 256, 4, 32, ctx, splits=splits)
    add("bf16", 256, 4, 16, 5000, window=300, splits=FORCED_SPLITS)
    add("bf16", 256, 4, 32, 1000, splits=FORCED_SPLITS, reference=ref_eager, suffix="-vs-eager")
    for window in (None, 40):  # the `long` gate model's decode, at the scale its q/k norms give
        for sharp in (False, True):
            shape = "bf16/d128/g4/bs16/long-gate" + (f"/w{window}" if window else "") + ("/sharp" if sharp else "")
            cases.append(
                KernelCase(
                    f"attn/tiled_onepass/{shape}",
                    "tiled_onepass",
                    flag,
                    torch.bfloat16,
                    partial(long_gate_inputs, window=window, sharp=sharp),
                    partial(run_onepass, None),
                    ref_fp32,
                    "bf16",
                    row,
                    ("long-gate",),
                )
            )
    return cases


def build_cases() -> list[KernelCase]:
    cases: list[KernelCase] = []
    canonical = {"generic": (128, 4), "warp_d128": (128, 4), "splitkv_swap": (128, 8)}
    for arm, (d, group) in canonical.items():  # every context length, both dtypes
        for dt in DTYPES:
            for ctx in CONTEXTS:
                cases.append(attn_case(arm, dt, d, group, 32, ctx, tags=("small",) if ctx == 33 else ()))
            for ctx in LONG_CONTEXTS:
                cases.append(attn_case(arm, dt, d, group, 32, ctx, tags=("long",)))
    for arm in canonical:  # the shape sweep at a context that is not a block multiple
        for dt in DTYPES:
            for d in (64, 128, 256):
                for group in (1, 4, 8):
                    for bs in (16, 32):
                        if supports(arm, d, group) and (d, group, bs) != (*canonical[arm], 32):
                            cases.append(attn_case(arm, dt, d, group, bs, 100))
        for dt in DTYPES:  # sliding windows: inside the context, and wider than it
            d, group = canonical[arm]
            cases.append(attn_case(arm, dt, d, group, 16, 685, window=256))
            cases.append(attn_case(arm, dt, d, group, 32, 100, window=1000))
    cases.append(attn_case("warp_d128", "bf16", 128, 4, 32, 1000, window=100))
    for ctx in (1, 100, 685):  # the group swap at forced split counts, empty splits included
        cases.append(attn_case("splitkv_swap", "bf16", 128, 4, 32, ctx, splits=FORCED_SPLITS))
    make = partial(paged_inputs, dtype=torch.bfloat16, ctx=100, d=128, group=4, block_size=16, window=None)
    cases.append(
        KernelCase(
            f"attn/splitkv_swap-partial/bf16/d128/g4/bs16/ctx100/s{FORCED_SPLITS}",
            "splitkv_swap",
            None,
            torch.float32,
            make,
            run_splitkv_partial,
            ref_splitkv_partial,
            "fp32",
            "KERNEL-ATTN-SPLITKV",
        )
    )
    cases += tiled_cases()
    cases += long_gate_cases()
    cases += bitwise_tiled_cases("tiled_fused", run_tiled_fused, 2)  # one launch: several splits only
    cases += bitwise_tiled_cases("tiled_pipelined", run_tiled_pipelined, 1)
    cases += bitwise_tiled_cases("tiled_pipelined_pdl", run_tiled_pipelined_pdl, 1)
    cases += onepass_cases()
    for dt in DTYPES:
        for d in (64, 128, 256):
            for bs in (16, 32):
                make = partial(kv_inputs, dtype=DTYPES[dt], d=d, bs=bs)
                cases.append(
                    KernelCase(
                        f"kv_store/{dt}/d{d}/bs{bs}",
                        "kv_store",
                        None,
                        DTYPES[dt],
                        make,
                        run_kv,
                        ref_kv_store,
                        "exact",
                        "KERNEL-KV-STORE",
                        ("small",) if (d, bs) == (128, 16) else (),
                    )
                )
    return cases


CASES = build_cases()
