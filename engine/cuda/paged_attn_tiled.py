"""Binding for the tiled paged decode attention (paged_attn_tiled.cu): two tensor-core passes over a cp.async
pipeline (scores, then probabilities rounded as the reference rounds them times V), split-KV sized from the
block tables' capacity so that no context length is read on the host.

With `fused=True` (the kernel table's `tiled_fused` arm, under VT_ATTN_TILED_FUSED) the same arithmetic
runs in one launch where it takes the shape (`fused_stages`, `supports_fused`; several splits only): each block
keeps its split's scores in shared memory, the splits of a (sequence, KV head) wait for each other's
statistics, and the last one adds their partial sums, so the output is bitwise the two-pass output.
Where it does not fit the two passes run.

With `pipelined=True` (the `tiled_pipelined` arm, under VT_ATTN_PV_PIPELINED) the P.V pass requests its first V
tiles before it reads the split statistics, loads each tile's scores a tile ahead, and with several splits its
last split adds the partial sums (the fused arm's arrival counters), so the split sum is no launch of its own:
the same arithmetic in the same order, bitwise the plain two passes' output."""

from __future__ import annotations

import ctypes
from functools import cache
from typing import NamedTuple

import torch

from engine.cuda import build, ffi, paged_attn, split_table
from engine.cuda import device as cuda_device

_P, _I, _F = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
HEAD_DIMS = (64, 128, 256)
MAX_GROUP = 8  # query heads per KV head: rows of the kernel's 16-row mma tile (paged_attn_tiled.cuh)
DTYPES = (torch.bfloat16, torch.float16)
# the fused arm's arrival counters: 2 int32 per (sequence, KV head), zeroed once per device and left zero
# by every launch, shared by every stream (two fused launches must not run at once on different streams)
FUSED_COUNTERS = 1 << 17
_COUNTERS: dict[torch.device, torch.Tensor] = {}


@cache
def _lib() -> ctypes.CDLL:
    lib = build.load("paged_attn_tiled.cu")
    ffi.bind(lib, "vt_paged_attn_tiled_num_splits", [ctypes.POINTER(_I), _I, _I, _I, _I])
    ffi.bind(
        lib,
        "vt_paged_attn_tiled_decode",
        [_P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _I, _I, _I, _I, _I, _I, _F, _I, _I, _I, _P],
    )
    ffi.bind(
        lib,
        "vt_paged_attn_tiled_pipelined_decode",
        [_P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _I, _I, _I, _I, _I, _I, _F, _I, _I, _I, _I, _P],
    )
    ffi.bind(lib, "vt_paged_attn_tiled_fused_stages", [ctypes.POINTER(_I), _I, _I, _I, _I, _I, _I, _I, _I])
    ffi.bind(
        lib,
        "vt_paged_attn_tiled_fused_decode",
        [_P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _I, _I, _I, _I, _I, _I, _F, _I, _I, _I, _I, _P],
    )
    return lib


def supports(head_dim: int, group: int, dtype: torch.dtype) -> bool:
    """The shapes and dtypes the kernel is compiled for."""
    return dtype in DTYPES and head_dim in HEAD_DIMS and 1 <= group <= MAX_GROUP


@cache
def num_splits(rows: int, max_context: int, head_dim: int, dtype: torch.dtype, device_index: int) -> int:
    """Splits that fill the device's resident block slots, none shorter than 4 tiles of max_context."""
    args = (rows, max_context, head_dim, ffi.DTYPE_CODES[dtype])
    return ffi.query(_lib(), "vt_paged_attn_tiled_num_splits", "paged_attn_tiled", device_index, *args)


@cache
def fused_stages(
    batch: int,
    hq: int,
    hkv: int,
    head_dim: int,
    block_size: int,
    max_blocks: int,
    splits: int,
    dtype: torch.dtype,
    device_index: int,
) -> int:
    """The pipeline stages the one-launch kernel runs this shape with (3 or 2), or 0 where it does not take
    it: one split (the two passes are faster there), scores that do not fit in shared memory, or a grid that
    is not resident at once (its blocks wait on each other)."""
    args = (batch, hq, hkv, head_dim, block_size, max_blocks, splits, ffi.DTYPE_CODES[dtype])
    return ffi.query(_lib(), "vt_paged_attn_tiled_fused_stages", "paged_attn_tiled", device_index, *args)


class Shape(NamedTuple):
    """The launch geometry every binding reads off q, the cache and the block tables."""

    batch: int
    hq: int
    hkv: int
    d: int
    block_size: int
    max_blocks: int
    dtype: torch.dtype
    device_index: int

    @classmethod
    def of(cls, q: torch.Tensor, k_cache: torch.Tensor, block_tables: torch.Tensor) -> Shape:
        batch, hq, d = q.shape
        hkv, block_size = k_cache.shape[2], k_cache.shape[1]
        return cls(batch, hq, hkv, d, block_size, block_tables.shape[1], q.dtype, q.device.index or 0)

    def args(self, scale: float, sliding_window: int | None) -> list[int | float]:
        """The decode launchers' geometry arguments, in their order: batch, Hq, Hkv, head_dim, block size, max blocks,
        the scale and the window (0: none)."""
        return [self.batch, self.hq, self.hkv, self.d, self.block_size, self.max_blocks, scale, sliding_window or 0]

    def partials(self, splits: int, device: torch.device, out: bool = True) -> list[torch.Tensor | None]:
        """Split-KV's fp32 partials: the running max and sum [batch, splits, Hq], and (with `out`) the partial
        outputs [batch, splits, Hq, D]."""
        m_part = torch.empty(self.batch, splits, self.hq, dtype=torch.float32, device=device)
        o_part = torch.empty(self.batch, splits, self.hq, self.d, dtype=torch.float32, device=device) if out else None
        return [m_part, torch.empty_like(m_part), o_part]

    def splits(self) -> int:
        """`num_splits` over the tables' capacity (no host read of the lengths), or where a call runs under
        VT_ATTN_SPLIT_TABLE and the measured table holds this shape, its count (engine/cuda/split_table.py)."""
        rows, cap = self.batch * self.hkv, self.max_blocks * self.block_size
        rule = num_splits(rows, cap, self.d, self.dtype, self.device_index)
        return split_table.pick("tiled", rows, cap, self.d, self.dtype, self.device_index, rule)

    def stages(self, splits: int) -> int:
        """`fused_stages` of this shape with `splits` splits (0: the one launch does not take it)."""
        return fused_stages(
            self.batch,
            self.hq,
            self.hkv,
            self.d,
            self.block_size,
            self.max_blocks,
            splits,
            self.dtype,
            self.device_index,
        )


def check_inputs(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    sliding_window: int | None,
) -> tuple[torch.Tensor, torch.Tensor, Shape]:
    """The checks every decode binding runs (`paged_attn.check_inputs`, then the shapes and dtypes the tiled
    kernels are compiled for and the window), naming the bad argument; returns the int32 tables and lengths
    and the launch geometry."""
    tables, lens = paged_attn.check_inputs(q, k_cache, v_cache, block_tables, context_lens)
    shape = Shape.of(q, k_cache, tables)
    if not supports(shape.d, shape.hq // shape.hkv, q.dtype):
        raise ValueError(
            f"q: the tiled arm takes head_dim in {HEAD_DIMS}, at most {MAX_GROUP} query heads per KV "
            f"head, bf16 or fp16; got head_dim {shape.d}, group {shape.hq // shape.hkv}, {q.dtype}"
        )
    ffi.require_window(sliding_window)
    return tables, lens, shape


def supports_fused(q: torch.Tensor, k_cache: torch.Tensor, block_tables: torch.Tensor) -> bool:
    """Whether the one-launch kernel takes this decode: its stages fit and its arrival counters are ready (not
    first made under graph capture); no host read of the lengths."""
    shape = Shape.of(q, k_cache, block_tables)
    if shape.stages(shape.splits()) == 0:
        return False
    # without ready counters the call would run the two passes: the table must count that as the fallback
    return arrival_counters(q.device, 2 * shape.batch * shape.hkv) is not None


def supports_pipelined(q: torch.Tensor, k_cache: torch.Tensor, block_tables: torch.Tensor) -> bool:
    """Whether the pipelined P.V pass takes this decode with its split sum folded: one split, or arrival counters
    that are ready (not first made under graph capture); no host read of the lengths."""
    shape = Shape.of(q, k_cache, block_tables)
    return shape.splits() == 1 or arrival_counters(q.device, 2 * shape.batch * shape.hkv) is not None


PDL_BLOCKS_PER_SM = 2  # a dependent P.V grid of at most this many blocks per SM is resident beside its scores grid


def supports_pdl(q: torch.Tensor, k_cache: torch.Tensor, block_tables: torch.Tensor) -> bool:
    """Where the P.V pass gains as a programmatic dependent of the scores pass (VT_ATTN_PDL): `supports_pipelined`, and
    a grid of at most PDL_BLOCKS_PER_SM blocks per SM, so both passes' grids are resident at once (each pass takes
    4 blocks of an SM at head_dim 128). Past it (batch 32 at context 1024) the dependent's waiting blocks cost the
    whole step more than the overlap gains (the row's spec)."""
    shape = Shape.of(q, k_cache, block_tables)
    sms = cuda_device.probe(shape.device_index).sms
    blocks = shape.batch * shape.hkv * shape.splits()
    return blocks <= PDL_BLOCKS_PER_SM * sms and supports_pipelined(q, k_cache, block_tables)


def arrival_counters(dev: torch.device, need: int) -> torch.Tensor | None:
    """The device's zeroed arrival counters; None under CUDA graph capture before their first use (a zeroing
    memset captured into a graph would not run until replay), or when a call needs more than there are."""
    counters = _COUNTERS.get(dev)
    if counters is None:
        if torch.cuda.is_current_stream_capturing():
            return None
        counters = _COUNTERS[dev] = torch.zeros(FUSED_COUNTERS, dtype=torch.int32, device=dev)
    return counters if need <= counters.numel() else None


def decode(
    q: torch.Tensor,  # q: [batch, Hq, D] contiguous, bf16 or fp16
    k_cache: torch.Tensor,  # k_cache: [num_blocks, block_size, Hkv, D] contiguous
    v_cache: torch.Tensor,  # v_cache: [num_blocks, block_size, Hkv, D] contiguous
    block_tables: torch.Tensor,  # block_tables: [batch, max_blocks] int32
    context_lens: torch.Tensor,  # context_lens: [batch] int32, each in [1, max_blocks * block_size]
    scale: float,
    sliding_window: int | None = None,
    splits: int | None = None,  # None: num_splits over the tables' capacity
    fused: bool = False,  # the one-launch kernel where it fits (`supports_fused`), else the two passes
    pipelined: bool = False,  # the pipelined P.V pass; its split sum folded where counters are ready
    pdl: bool = False,  # with it: the P.V pass a programmatic dependent of the scores pass (sm_90), the same bits
) -> torch.Tensor:  # [batch, Hq, D], q.dtype
    """`launch_decode` after the checks that name the bad argument: the entry for a direct call."""
    check_inputs(q, k_cache, v_cache, block_tables, context_lens, sliding_window)
    return launch_decode(
        q, k_cache, v_cache, block_tables, context_lens, scale, sliding_window, splits, fused, pipelined, pdl
    )


# what the tiled kernels need past the op's check and `supports`: the paged kernels' one predicate
supports_inputs = paged_attn.supports_inputs


def launch_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    splits: int | None = None,
    fused: bool = False,
    pipelined: bool = False,
    pdl: bool = False,
) -> torch.Tensor:  # [batch, Hq, D], q.dtype
    """The tiled decode launch (arguments as `decode`'s), its inputs already checked (by `decode`, or by the table's
    check, `supports` and `supports_inputs`). The tables and lengths go to the kernel as int32 (a no-op when they
    are: the staged step's are)."""
    tables, lens = block_tables.to(torch.int32).contiguous(), context_lens.to(torch.int32).contiguous()
    shape = Shape.of(q, k_cache, tables)
    if splits is None:
        splits = shape.splits()
    if fused:
        out = _fused(q, k_cache, v_cache, tables, lens, scale, sliding_window, splits, shape, required=False)
        if out is not None:
            return out
    out = torch.empty_like(q)
    cap = tables.shape[1] * shape.block_size
    scores = torch.empty(shape.batch, shape.hq, cap, dtype=q.dtype, device=q.device)  # pass 1 -> 2, rounded to q.dtype
    parts = shape.partials(splits, q.device, out=splits > 1)
    lib = _lib()
    buffers = ffi.ptrs(out, scores, *parts)
    if pipelined:
        counters = arrival_counters(q.device, 2 * shape.batch * shape.hkv) if splits > 1 else None
        entry, name = lib.vt_paged_attn_tiled_pipelined_decode, "vt_paged_attn_tiled_pipelined_decode"
        buffers += ffi.ptrs(counters)
    elif pdl:
        raise ValueError("pdl: the programmatic dependent launch is the pipelined P.V pass's (pipelined=True)")
    else:
        entry, name = lib.vt_paged_attn_tiled_decode, "vt_paged_attn_tiled_decode"
    tail = [int(pdl)] if pipelined else []
    rc = entry(
        *buffers,
        *ffi.ptrs(q, k_cache, v_cache, tables, lens),
        *shape.args(scale, sliding_window),
        splits,
        ffi.dtype_code(q, "q"),
        *tail,
        ffi.stream(q.device),
    )
    ffi.check(rc, name, lib, "paged_attn_tiled")
    return out


def decode_fused(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None,
    splits: int | None,
    required: bool = True,
) -> torch.Tensor | None:
    """The one-launch arm (arguments as `decode`'s, checked the same way); None where it does not fit, or an
    error with `required` (the numerics cases use that, so a case proves the fused kernel ran)."""
    tables, lens, shape = check_inputs(q, k_cache, v_cache, block_tables, context_lens, sliding_window)
    return _fused(q, k_cache, v_cache, tables, lens, scale, sliding_window, splits, shape, required)


def _fused(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    tables: torch.Tensor,
    lens: torch.Tensor,
    scale: float,
    sliding_window: int | None,
    splits: int | None,
    shape: Shape,
    required: bool,
) -> torch.Tensor | None:
    """`decode_fused` on inputs `check_inputs` passed."""
    batch, hq, hkv, d, block_size = shape.batch, shape.hq, shape.hkv, shape.d, shape.block_size
    if splits is None:
        splits = shape.splits()
    why = None
    stages = shape.stages(splits)
    if stages == 0:
        why = "one split, or its shared memory or its grid does not fit this shape"
    counters = arrival_counters(q.device, 2 * batch * hkv) if why is None else None
    if why is None and counters is None:
        why = "no arrival counters (first use under graph capture, or too many sequences)"
    if why is not None:
        if required:
            raise ValueError(
                f"tiled fused arm: {why} (batch {batch}, {hq}/{hkv} heads, head_dim {d}, "
                f"{tables.shape[1]} blocks of {block_size}, {splits} splits)"
            )
        return None
    assert counters is not None  # why is None, so the counters were made
    out = torch.empty_like(q)
    lib = _lib()
    rc = lib.vt_paged_attn_tiled_fused_decode(
        *ffi.ptrs(out, *shape.partials(splits, q.device), counters, q, k_cache, v_cache, tables, lens),
        *shape.args(scale, sliding_window),
        splits,
        stages,
        ffi.dtype_code(q, "q"),
        ffi.stream(q.device),
    )
    ffi.check(rc, "vt_paged_attn_tiled_fused_decode", lib, "paged_attn_tiled")
    return out
