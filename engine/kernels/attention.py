"""Attention's rows: prefill and extend (varlen on tensor cores), and the paged decode attention with its
ordered arms (one-pass, tiled, generic) and its by-name arms (split-KV with the GQA group swap, warp-split-KV at
head_dim 128); predicates over (head_dim, group, dtype)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import partial
from typing import Any

import torch

from engine.cuda import paged_attn as cuda_paged_attn
from engine.cuda import paged_attn_onepass as cuda_onepass
from engine.cuda import paged_attn_tiled as cuda_tiled
from engine.cuda import prefill_attn as cuda_prefill
from engine.cuda import split_table
from engine.cuda import splitkv as cuda_splitkv
from engine.flags import FlagSnapshot
from engine.kernels.table import COUNTS, FP32_PROBS_RAZOR, Arm, Op, device_of, gated_by
from engine.ops import paged_attn


def supports_heads(
    pred: Callable[[int, int, torch.dtype], bool],
    inputs: Callable[..., bool] = cuda_paged_attn.supports_inputs,
) -> Callable[..., bool]:
    """A paged decode arm's predicate over paged_decode_attention's arguments: `pred`, the shapes its kernel is
    compiled for (head_dim, group, dtype), and `inputs`, what its launch needs past the op's check (by default the
    paged kernels' one predicate: q and the caches contiguous, every tensor on q's device)."""

    def supports(
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        block_tables: torch.Tensor,
        context_lens: torch.Tensor,
        *_: Any,
        **__: Any,
    ) -> bool:
        shape_ok = pred(q.shape[2], q.shape[1] // k_cache.shape[2], q.dtype)
        return shape_ok and inputs(q, k_cache, v_cache, block_tables, context_lens)

    return supports


_PA = cuda_paged_attn
# the tiled arm's shapes (head_dim, group, dtype) and what its launch needs past the op's check
supports_tiled = supports_heads(cuda_tiled.supports)


def _tiled_variant(
    predicate: str, fused: bool = False, pipelined: bool = False, pdl: bool = False
) -> tuple[Callable[..., bool], Callable[..., torch.Tensor]]:
    """A variant of the tiled arm: its predicate (`supports_tiled`, and `cuda_tiled.<predicate>`, looked up at call
    time, for what else it needs: its arrival counters ready, its grid resident) and its kernel
    (`cuda_tiled.launch_decode` in that mode, unchecked: the op's check and the predicate hold its inputs). The
    predicate refuses a shape the binding would hand to the plain two passes (no ready counters: first use under
    graph capture), so the counters name the kernel that ran."""

    def supports(
        q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor, *rest: Any, **__: Any
    ) -> bool:
        inputs_ok = supports_tiled(q, k_cache, v_cache, block_tables, *rest)
        return inputs_ok and bool(getattr(cuda_tiled, predicate)(q, k_cache, block_tables))

    return supports, partial(cuda_tiled.launch_decode, fused=fused, pipelined=pipelined, pdl=pdl)


def supports_onepass(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    *_: Any,
    **__: Any,
) -> bool:
    """The one-pass arm's shapes on the table's device (head_dim 256 where two blocks fit per SM) and, with several
    splits, ready arrival counters (else the call would fail), and what its launch needs past the op's check."""
    inputs_ok = _PA.supports_inputs(q, k_cache, v_cache, block_tables, context_lens)
    fits = inputs_ok and cuda_onepass.fits(q.shape[2], device_of(q))
    return fits and cuda_onepass.supports_inputs(q, k_cache, block_tables)


supports_tiled_fused, _tiled_fused = _tiled_variant("supports_fused", fused=True)  # the one launch
supports_tiled_pipelined, _tiled_pipelined = _tiled_variant("supports_pipelined", pipelined=True)  # the pipelined P.V
supports_tiled_pdl, _tiled_pipelined_pdl = _tiled_variant("supports_pdl", pipelined=True, pdl=True)  # ... chained


def supports_prefill_mma(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    seq_lens: Sequence[int],
    scale: float,
    sliding_window: int | None = None,
    device_lens: torch.Tensor | None = None,
) -> bool:
    """The varlen kernel's head dims and dtypes, and what its launch needs past the op's check."""
    return cuda_prefill.supports(q.shape[2], q.dtype) and cuda_prefill.supports_prefill(q, k, v, device_lens)


def supports_extend_mma(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: Sequence[int],
    prefix_lens: Sequence[int],
    scale: float,
    sliding_window: int | None = None,
    device_lens: torch.Tensor | None = None,
) -> bool:
    """`supports_prefill_mma` over a cached prefix: the caches and the block table as the launch needs them."""
    shape_ok = cuda_prefill.supports(q.shape[2], q.dtype)
    return shape_ok and cuda_prefill.supports_extend(q, k_cache, v_cache, block_tables, device_lens)


def _device_lens(q: torch.Tensor, device_lens: torch.Tensor | None, *lists: Sequence[int]) -> torch.Tensor:
    """The lengths as the kernel's [rows, seqs] int32 device tensor: the step's upload, else a copy of the lists
    (a host-to-device copy: tests and benchmarks of the op alone)."""
    if device_lens is not None:
        return device_lens
    return torch.tensor([list(x) for x in lists], dtype=torch.int32).to(q.device)


def _prefill_mma(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    seq_lens: Sequence[int],
    scale: float,
    sliding_window: int | None = None,
    device_lens: torch.Tensor | None = None,
) -> torch.Tensor:
    lens = _device_lens(q, device_lens, seq_lens)
    return cuda_prefill.launch_prefill(q, k.contiguous(), v.contiguous(), lens, scale, sliding_window)


def _extend_mma(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: Sequence[int],
    prefix_lens: Sequence[int],
    scale: float,
    sliding_window: int | None = None,
    device_lens: torch.Tensor | None = None,
) -> torch.Tensor:
    lens = _device_lens(q, device_lens, seq_lens, prefix_lens)
    return cuda_prefill.launch_extend(q, k_cache, v_cache, block_tables.to(torch.int32), lens, scale, sliding_window)


_DECODE_ROWS_WS = 1 << 26  # fp32 elements of the generic decode kernel's logits workspace the arm may take


def supports_decode_rows(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor, *_: Any, **__: Any
) -> bool:
    """The generic decode kernel's head dims, a logits workspace within `_DECODE_ROWS_WS`, and what its launch needs
    past the extend op's check (ranks, q's and K's dtype, sizes, the window, the device lengths): the caches
    contiguous, V of q's dtype, a [seqs, max_blocks] block table, all on q's device (the adapter hands q over
    contiguous and the tokens' tables as int32)."""
    dev = q.device
    if block_tables.dim() != 2 or block_tables.device != dev:
        return False
    caches = v_cache.dtype == q.dtype and all(t.device == dev and t.is_contiguous() for t in (k_cache, v_cache))
    cap = block_tables.shape[1] * k_cache.shape[1]
    fits = _PA.supports(_PA.GENERIC, q.shape[2], 1, q.dtype) and q.shape[0] * q.shape[1] * cap <= _DECODE_ROWS_WS
    return caches and fits


def _extend_decode_rows(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: Sequence[int],
    prefix_lens: Sequence[int],
    scale: float,
    sliding_window: int | None = None,
    device_lens: torch.Tensor | None = None,
) -> torch.Tensor:
    """Every new token as one decode row (its sequence's table, its own position + 1 as the context): the
    generic decode kernel's launch, which takes fp32; per-token tables and lengths built on the device, no host
    read."""
    seq, ctx = decode_row_lens(_device_lens(q, device_lens, seq_lens, prefix_lens), q.shape[0])
    tables = block_tables[seq].to(torch.int32)
    return _PA.launch_decode(q.contiguous(), k_cache, v_cache, tables, ctx, scale, sliding_window, arm=_PA.GENERIC)


def decode_row_lens(lens: torch.Tensor, tokens: int) -> tuple[torch.Tensor, torch.Tensor]:  # each [tokens]
    """Per packed token of a varlen batch (lens: [2, seqs], new and cached tokens): its sequence (int64) and its
    context as a decode row, its position + 1 (int32). Device ops only, no host read."""
    lens = lens.long()
    seq = torch.repeat_interleave(torch.arange(lens.shape[1], device=lens.device), lens[0], output_size=tokens)
    first = torch.cumsum(lens[0], 0) - lens[0]  # each sequence's first packed token
    ctx = lens[1][seq] + torch.arange(tokens, device=lens.device) - first[seq] + 1
    return seq, ctx.to(torch.int32)


_PREFILL_MMA_NEEDS = f"bf16/fp16, head_dim in {cuda_prefill.HEAD_DIMS}, q's heads packed, every tensor on q's device"
_EXTEND_MMA_NEEDS = f"{_PREFILL_MMA_NEEDS}, contiguous caches and block table"
prefill_attention = Op(
    paged_attn.prefill_attention,
    paged_attn.check_prefill_attention,
    [
        Arm("mma", gated_by("VT_PREFILL_ATTN"), supports_prefill_mma, _PREFILL_MMA_NEEDS, _prefill_mma),
    ],
)
# The varlen kernel on tensor cores, then (fp32, small steps) one generic decode row per new token.
extend_attention = Op(
    paged_attn.extend_attention,
    paged_attn.check_extend_attention,
    [
        Arm("mma", gated_by("VT_PREFILL_ATTN"), supports_extend_mma, _EXTEND_MMA_NEEDS, _extend_mma),
        Arm(
            "decode_rows",
            gated_by("VT_PREFILL_ATTN"),
            supports_decode_rows,
            f"head_dim at most 256, a multiple of 8, tokens x heads x table capacity at most {_DECODE_ROWS_WS}; the "
            "caches contiguous, V of q's dtype, a 2-D block table, on q's device",
            _extend_decode_rows,
        ),
    ],
)


def split_table_scope(snapshot: FlagSnapshot, count: bool) -> AbstractContextManager[None]:
    """The paged decode arms' split count: the measured table's where VT_ATTN_SPLIT_TABLE is on and it holds the
    shape (engine/cuda/split_table.py), else each arm's occupancy rule; with `count`, a call the table decided is
    counted as the flag's (`COUNTS.settings`). Off (the default) it sets nothing: the rule is what no scope gives."""
    on = snapshot.enabled("VT_ATTN_SPLIT_TABLE")
    return _split_table_on(on, count) if on or split_table.is_active() else nullcontext()


@contextmanager
def _split_table_on(on: bool, count: bool) -> Iterator[None]:
    with split_table.active(on):
        before = split_table.HITS.total()
        yield
        if count and split_table.HITS.total() > before:
            COUNTS.settings[("paged_decode_attention", "VT_ATTN_SPLIT_TABLE")] += 1


# Precedence: the one-pass arm (ON by default since its flip; an online softmax, held to the fp32 reference and the
# razor's fp32-probabilities setting), the one-launch tiled arm and the pipelined two passes (the rollback's choice,
# VT_ATTN_ONEPASS=0), tiled, then the generic kernel (fp32, other head dims, more than 8 query heads per KV head). The by-name arms lost their A/Bs to
# the tiled arm at every measured shape (docs/BENCHMARKS.md, "Arm outcomes"); they stay because the kernel set this
# engine mirrors has them (vllm.cpp's GQA group swap, its #48, and warp-split-KV at head_dim 128, its #383), for
# their own numerics cases and A/Bs, and no default order reaches them. The split-KV arm without the swap, the
# GQA-fused arm and the warp arm at head_dim 256 lost theirs too and are gone.
paged_decode_attention = Op(
    paged_attn.paged_decode_attention,
    paged_attn.check_paged_decode_attention,
    [
        Arm(
            "tiled_onepass",
            gated_by("VT_ATTN_ONEPASS", "VT_ATTN_TILED"),
            supports_onepass,
            f"bf16/fp16, head_dim in {cuda_onepass.HEAD_DIMS} (256: two blocks per SM), at most "
            f"{cuda_onepass.MAX_GROUP} query heads per KV head; with several KV splits, ready arrival counters; q and "
            "the caches contiguous, every tensor on q's device",
            cuda_onepass.launch_decode,
            razor=FP32_PROBS_RAZOR,
        ),
        Arm(
            "tiled_fused",
            gated_by("VT_ATTN_TILED_FUSED", "VT_ATTN_TILED"),
            supports_tiled_fused,
            "the tiled arm's shapes, several KV splits, scores in shared memory and a grid resident at once",
            _tiled_fused,
        ),
        Arm(
            "tiled_pipelined_pdl",
            gated_by("VT_ATTN_PDL", "VT_ATTN_PV_PIPELINED", "VT_ATTN_TILED"),
            supports_tiled_pdl,
            "the tiled arm's shapes; with several KV splits, ready arrival counters; at most "
            f"{cuda_tiled.PDL_BLOCKS_PER_SM} blocks per SM (both passes' grids resident)",
            _tiled_pipelined_pdl,
        ),
        Arm(
            "tiled_pipelined",
            gated_by("VT_ATTN_PV_PIPELINED", "VT_ATTN_TILED"),
            supports_tiled_pipelined,
            "the tiled arm's shapes; with several KV splits, ready arrival counters",
            _tiled_pipelined,
        ),
        Arm(
            "tiled",
            gated_by("VT_ATTN_TILED"),
            supports_tiled,
            f"bf16/fp16, head_dim in {cuda_tiled.HEAD_DIMS}, at most {cuda_tiled.MAX_GROUP} query heads per KV head, "
            "q and the caches contiguous, every tensor on q's device",
            cuda_tiled.launch_decode,
        ),
        Arm(
            "generic",
            gated_by(),
            supports_heads(partial(_PA.supports, _PA.GENERIC)),
            "head_dim at most 256, a multiple of 8, q and the caches contiguous, every tensor on q's device",
            partial(_PA.launch_decode, arm=_PA.GENERIC),
            notice=True,  # about 12x slower than the tiled arm: a model that lands here is told why
        ),
    ],
    by_name=[
        Arm(
            "splitkv_swap",
            gated_by(),
            supports_heads(cuda_splitkv.supports, cuda_splitkv.supports_inputs),
            f"fp32/bf16, head_dim in {cuda_splitkv.HEAD_DIMS}, {cuda_splitkv.SWAP_GROUPS} query heads per KV head, q "
            "and the caches contiguous, every tensor on q's device, a block table that addresses a token",
            cuda_splitkv.launch_decode,
        ),
        Arm(
            "warp_d128",
            gated_by(),
            supports_heads(partial(_PA.supports, _PA.WARP)),
            "fp32/bf16, head_dim 128, q and the caches contiguous, every tensor on q's device",
            partial(_PA.launch_decode, arm=_PA.WARP),
        ),
    ],
    scope=split_table_scope,
)
