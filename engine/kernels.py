"""The kernel table: per op, its pure-torch reference and its ordered CUDA arms; every call goes through it.

The contract (what model code, gates and benchmarks may rely on):

- An `Op` joins one reference from `engine/ops/` (the semantics, runs anywhere), its entry check (the
  `check_<op>` beside the reference: shapes and dtypes, naming the tensor) and its `Arm`s in order. An
  `Arm` is a name, the flags that must all be on (`gated_by("VT_X", ...)`, from engine/flags.py), a `supports` predicate
  over the op's own arguments (shapes, dtypes, strides; `needs` says it in words) and the kernel (a
  binding in `engine/cuda/`, called with the op's arguments). A `composite` arm's kernel takes the
  snapshot first, because it runs other ops of this table (dequant, then linear); `_by_parts(glue)` makes
  one from a composite reference's own glue (`engine/ops/_compose.py`), run over the table's ops.
- `kernels.<op>(snapshot, *args)` (or `kernels.call("<op>", snapshot, *args)`) validates the inputs once,
  then runs the first arm whose flags are on in `snapshot` and whose `supports` accepts the inputs, and
  the reference when none does. Arms run only on CUDA tensors (the op's first argument) and only while
  VT_KERNELS is on; otherwise the reference runs and no arm is tried. A snapshot is a frozen
  `engine.flags.FlagSnapshot`: a Runner builds one when it starts and passes it down, so eager steps,
  graph capture and replay make the same choice; tests and benchmarks build their own, nothing reads or
  writes the environment here.
- `Op.run_arm(name, *args)` runs one named arm (or "reference") whatever the flags say, after the same
  check: what a gate or benchmark uses to name the arm it measures. `Op.choose(snapshot, *args)` says
  which arm a call would run, without running or counting it.
- `Op.injected`, when set, is an arm that takes every call whatever the flags and the device: a gate runs a
  peer in place of the op's arms with it (lab/gates/peer_attention.py), counted as `(op, its name)`.
- Every call is counted (`COUNTS`): `COUNTS.ran[(op, arm)]` (arm "reference" for the reference) and
  `COUNTS.fallbacks[(op, arm, needs)]` for each arm that was enabled but declined the inputs. Reset them
  with `reset_counts()`, read a copy with `counts()`, print them with `render_counts()`, and ask
  `arms_ran(flag)` how often an arm gated by a flag ran (the flip protocol fails on 0). Counts are Python
  calls: a replayed CUDA graph runs its captured arms without counting again.
- `quantized_linear(snapshot, x, method, weights, ...)` is a quantized layer's entry: it runs the
  `<method>_linear` op of the table (engine/model/layers.py `QuantLinear`).
- A new op is one `Op(...)` below, registered in `TABLE` by its name (the reference's name); a new arm is
  one `Arm(...)` in its op's list, in the place of its precedence.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Generic, ParamSpec, TypeVar

import torch

from engine.cuda import act as cuda_act
from engine.cuda import gdn as cuda_gdn
from engine.cuda import gemv as cuda_gemv
from engine.cuda import gemv_stream as cuda_stream
from engine.cuda import kv_store as cuda_kv_store
from engine.cuda import moe as cuda_moe
from engine.cuda import norm as cuda_norm
from engine.cuda import paged_attn as cuda_paged_attn
from engine.cuda import paged_attn_onepass as cuda_onepass
from engine.cuda import paged_attn_tiled as cuda_tiled
from engine.cuda import prefill_attn as cuda_prefill
from engine.cuda import quant as cuda_quant
from engine.cuda import rope as cuda_rope
from engine.cuda import sample as cuda_sample
from engine.cuda import sample_rows as cuda_sample_rows
from engine.cuda import splitkv as cuda_splitkv
from engine.flags import FLAGS, FlagSnapshot
from engine.ops import (
    act,
    gdn,
    gemv,
    kv_store,
    moe,
    norm,
    paged_attn,
    quant,
    rope,
    sample,
)

P = ParamSpec("P")
R = TypeVar("R")
REFERENCE_ARM = "reference"


def gated_by(*names: str) -> tuple[str, ...]:
    """The flags an arm needs, all on (none: on whenever VT_KERNELS is); each must be declared in engine/flags.py.

    The env-doc check counts `gated_by("VT_X", ...)` as the place that consults VT_X (its first name)."""
    unknown = [n for n in names if n not in FLAGS or not FLAGS[n].is_bool]
    if unknown:
        raise KeyError(f"gated_by: {', '.join(unknown)} not a boolean flag declared in engine/flags.py")
    return names


@dataclass(frozen=True)
class Razor:
    """The near-tie razor's setting an arm is judged with (`gate neartie --require-arm VT_X` takes it from the
    arms VT_X gates): the oracle's attention, the two budgets and the log-prob limits. The oracle must round as the
    arm does."""

    name: str
    oracle_attn: str  # "eager" (scores and probabilities in the dtype), "sdpa" (fp32), "online" (P rounded for P.V)
    max_near_tie_rate: float
    max_out_of_band_rate: float
    # per dtype: the most the run's mean log-prob distance (lab/gates/harness.py logprob_distance) may be, in
    # nats, against this setting's oracle; a dtype not named here is judged by the budgets alone
    max_logprob_dist: tuple[tuple[str, float], ...] = ()

    def logprob_limit(self, dtype: str) -> float | None:
        return dict(self.max_logprob_dist).get(dtype)


# the reference's rounding: every arm that rounds scores and probabilities to the dtype, as the eager oracle does
EAGER_RAZOR = Razor("eager", "eager", 0.01, 0.0)
# an arm that keeps fp32 probabilities (an online softmax), against the oracle at its rounding points ("online").
# The log-prob distance separates the seeded bugs from the correct twins (ENGINE-PERSISTENT spec: every bug 10/10,
# twins 0/10, CPU seeds 0-19); the token budgets stay as a backstop, wide enough that the two-split twin's 10-27
# near-ties and 1-3 out of band in 1024 positions pass (at 0.02 / 0.0015 it false-alarmed 3/10)
FP32_PROBS_RAZOR = Razor("fp32-probs", "online", 0.04, 0.004, (("float32", 2.5e-4), ("bfloat16", 0.7)))
RAZORS = {r.name: r for r in (EAGER_RAZOR, FP32_PROBS_RAZOR)}


@dataclass(frozen=True)
class Arm:
    """One fast implementation of an op: taken when all its `flags` are on and `supports(*args)` is true."""

    name: str
    flags: tuple[str, ...]  # every one must be on (`gated_by(...)`); () = on whenever VT_KERNELS is
    supports: Callable[..., bool]  # over the op's arguments, as the op is called
    needs: str  # what `supports` demands, in words: the reason recorded when the arm declines
    kernel: Callable[..., Any]
    composite: bool = False  # the kernel takes the snapshot first (it runs other ops of the table)
    notice: bool = False  # a call that falls to this arm past an enabled arm says so on stderr, once (`NOTICED`)
    razor: Razor = EAGER_RAZOR  # the near-tie razor's setting its flip is judged with

    def enabled(self, snapshot: FlagSnapshot) -> bool:
        return all(snapshot.enabled(f) for f in self.flags)


@dataclass
class Counts:
    """Selection counters: which arm each op ran, and every enabled arm that declined (with its reason)."""

    ran: Counter[tuple[str, str]] = field(default_factory=Counter)  # (op, arm) -> calls
    fallbacks: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (op, arm, needs) -> calls

    def copy(self) -> Counts:
        return Counts(Counter(self.ran), Counter(self.fallbacks))

    def clear(self) -> None:
        self.ran.clear()
        self.fallbacks.clear()


COUNTS = Counts()
NOTICED: set[tuple[str, str, str]] = set()  # (op, declined arm, needs): each fall to a notice arm said once


class Op(Generic[P, R]):
    """One row of the table: `op(snapshot, *args)` checks, picks the first enabled supported arm, counts, runs."""

    def __init__(self, reference: Callable[P, R], check: Callable[P, None], arms: Sequence[Arm] = ()) -> None:
        self.name = reference.__name__
        self.reference = reference
        self.check = check
        self.arms = tuple(arms)
        names = [a.name for a in self.arms]
        if len(set(names)) != len(names) or REFERENCE_ARM in names:
            raise ValueError(f"{self.name}: arm names must be unique and not {REFERENCE_ARM!r}: {names}")
        # an arm that takes every call, whatever the flags and the device (a gate's peer, lab/gates/
        # peer_attention.py); set and cleared by the gate around its run, counted like any arm
        self.injected: Arm | None = None

    def __call__(self, snapshot: FlagSnapshot, *args: P.args, **kwargs: P.kwargs) -> R:
        self.check(*args, **kwargs)
        if self.injected is not None:
            COUNTS.ran[(self.name, self.injected.name)] += 1
            return self.injected.kernel(*args, **kwargs)
        arm = self._select(snapshot, args, kwargs, count=True)
        if arm is None:
            COUNTS.ran[(self.name, REFERENCE_ARM)] += 1
            return self.reference(*args, **kwargs)
        COUNTS.ran[(self.name, arm.name)] += 1
        if arm.composite:
            return arm.kernel(snapshot, *args, **kwargs)
        return arm.kernel(*args, **kwargs)

    def choose(self, snapshot: FlagSnapshot, *args: P.args, **kwargs: P.kwargs) -> str:
        """The arm a call with these inputs would run ("reference" if none), without checking or counting."""
        if self.injected is not None:
            return self.injected.name
        arm = self._select(snapshot, args, kwargs, count=False)
        return REFERENCE_ARM if arm is None else arm.name

    def run_arm(self, name: str, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the arm `name` (or "reference") whatever the flags say; inputs checked, the call counted.

        A composite arm runs its inner ops with the default flags. An arm that does not support the
        inputs is an error naming what it needs."""
        self.check(*args, **kwargs)
        COUNTS.ran[(self.name, name)] += 1
        if name == REFERENCE_ARM:
            return self.reference(*args, **kwargs)
        arm = self.arm(name)
        if not arm.supports(*args, **kwargs):
            raise ValueError(f"{self.name}: arm {name!r} needs {arm.needs}")
        if arm.composite:
            return arm.kernel(FlagSnapshot.defaults(), *args, **kwargs)
        return arm.kernel(*args, **kwargs)

    def arm(self, name: str) -> Arm:
        for arm in (*self.arms, *filter(None, [self.injected])):
            if arm.name == name:
                return arm
        known = ", ".join([a.name for a in self.arms] + [REFERENCE_ARM])
        raise KeyError(f"{self.name}: no arm {name!r} (arms: {known})")

    def _select(self, snapshot: FlagSnapshot, args: tuple[Any, ...], kwargs: dict[str, Any], count: bool) -> Arm | None:
        if not self.arms or not snapshot.kernels or not args[0].is_cuda:
            return None
        declined: list[Arm] = []
        for arm in self.arms:
            if not arm.enabled(snapshot):
                continue
            if arm.supports(*args, **kwargs):
                if count and arm.notice:
                    self._notice(arm, declined)
                return arm
            if count:
                COUNTS.fallbacks[(self.name, arm.name, arm.needs)] += 1
                declined.append(arm)
        return None

    def _notice(self, taken: Arm, declined: list[Arm]) -> None:
        """One stderr line per (op, declined arm, reason) in a process: the call fell to a slow arm."""
        for arm in declined:
            key = (self.name, arm.name, arm.needs)
            if key not in NOTICED:
                NOTICED.add(key)
                print(
                    f"engine: {self.name} falls to its {taken.name} arm: {arm.name} needs {arm.needs} "
                    "(said once per process; the selection counters count every call)",
                    file=sys.stderr,
                )

    def __repr__(self) -> str:
        return f"Op({self.name}: {', '.join(a.name for a in self.arms) or 'reference only'})"


def call(name: str, snapshot: FlagSnapshot, *args: Any, **kwargs: Any) -> Any:
    """`TABLE[name](snapshot, *args, **kwargs)`: the table's ops by name."""
    if name not in TABLE:
        raise KeyError(f"no op {name!r} in the kernel table (ops: {', '.join(TABLE)})")
    return TABLE[name](snapshot, *args, **kwargs)


@dataclass(frozen=True)
class Switch:
    """A model-level choice behind a flag that is not one kernel (merged projections): counted like an arm."""

    name: str
    flags: tuple[str, ...]  # every one must be on
    arm: str  # the name counted when the switch is on; "reference" when off

    def __call__(self, snapshot: FlagSnapshot, x: torch.Tensor) -> bool:
        on = x.is_cuda and snapshot.kernels and all(snapshot.enabled(f) for f in self.flags)
        COUNTS.ran[(self.name, self.arm if on else REFERENCE_ARM)] += 1
        return on


# --- counters ---------------------------------------------------------------------------------------------
def reset_counts() -> None:
    COUNTS.clear()


def counts() -> Counts:
    """A copy of the selection counters as they stand."""
    return COUNTS.copy()


def arms_ran(flag: str, seen: Counts | None = None) -> int:
    """Calls of every arm gated by `flag` (an arm's own flags, or a switch's), in `seen` (default: now)."""
    seen = seen or COUNTS
    gated = {(op.name, a.name) for op in TABLE.values() for a in op.arms if flag in a.flags}
    gated |= {(s.name, s.arm) for s in SWITCHES.values() if flag in s.flags}
    return sum(n for key, n in seen.ran.items() if key in gated)


def ops_gated_by(flag: str) -> set[str]:
    """The ops that have an arm gated by `flag` (an arm's own flags, or a switch's)."""
    ops = {op.name for op in TABLE.values() for a in op.arms if flag in a.flags}
    return ops | {s.name for s in SWITCHES.values() if flag in s.flags}


def razors_gated_by(flag: str, snapshot: FlagSnapshot) -> dict[str, Razor]:
    """The razor settings of the arms gated by `flag` that `snapshot` enables, by `op/arm` (a switch: eager)."""
    found = {}
    for op in TABLE.values():
        for arm in op.arms:
            if flag in arm.flags and arm.enabled(snapshot):
                found[f"{op.name}/{arm.name}"] = arm.razor
    for switch in SWITCHES.values():
        if flag in switch.flags and all(snapshot.enabled(f) for f in switch.flags):
            found[f"{switch.name}/{switch.arm}"] = EAGER_RAZOR
    return found


def op_calls(ops: set[str], seen: Counts | None = None) -> int:
    """Calls of `ops` in `seen`, whichever arm ran them (the reference included)."""
    seen = seen or COUNTS
    return sum(n for (op, _), n in seen.ran.items() if op in ops)


def flags_of(op: str, arm: str) -> tuple[str, ...]:
    """The flags that gate one arm of the table ((), for the reference and for an arm injected by a gate)."""
    if op in SWITCHES and arm == SWITCHES[op].arm:
        return SWITCHES[op].flags
    if op in TABLE and any(a.name == arm for a in TABLE[op].arms):
        return TABLE[op].arm(arm).flags
    return ()


def render_counts(seen: Counts | None = None) -> str:
    """One line per (op, arm) that ran, then one per fallback: `arms: rms_norm/cuda 12 [VT_NORM_KERNEL]`."""
    seen = seen or COUNTS
    if not seen.ran:
        return "arms: none ran"
    lines = ["arms (calls; a replayed CUDA graph is not counted again):"]
    for (op, arm), n in sorted(seen.ran.items()):
        gated = flags_of(op, arm)
        lines.append(f"  {op}/{arm} {n}" + (f" [{' '.join(gated)}]" if gated else ""))
    for (op, arm, needs), n in sorted(seen.fallbacks.items()):
        lines.append(f"  fallback {op}/{arm} {n}: needs {needs}")
    return "\n".join(lines)


# --- support predicates (over each op's arguments) --------------------------------------------------------
def _any(*_: Any, **__: Any) -> bool:
    return True


def _gemv_rows(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> bool:
    """Decode rows (at most MAX_ROWS) of a row-major W take the GEMV, which streams W by rows; a prefill, or
    a transposed W (dequant-then-linear's W.T), keeps the GEMM, which reads it in place."""
    return x.numel() <= cuda_gemv.MAX_ROWS * x.shape[-1] and weight.stride(-1) == 1


def _gemv_persistent(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> bool:
    return _gemv_rows(x, weight, bias) and cuda_gemv.persistent_fits(x, weight)


def _gemv_stream(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> bool:
    x2 = x.reshape(-1, x.shape[-1])
    return _gemv_rows(x, weight, bias) and cuda_stream.fits(x2.shape[0], weight, x2)


_STREAM_NEEDS = (
    f"sm_90, 1 to {cuda_gemv.MAX_ROWS} rows in {cuda_gemv.MAX_STAGED_BYTES} bytes, 16-byte rows, a row-major W, and "
    f"a ring of two W rows (GLU: two gate/up pairs) per warp within {cuda_stream.RING_BYTES} bytes of shared memory"
)


_PERSISTENT_NEEDS = (
    f"at most {cuda_gemv.MAX_ROWS} rows, a row-major weight, a row in one batch of loads (K at most 1024 in bf16), "
    f"and at least {cuda_gemv.SPLIT_BELOW_WARPS_PER_SM} rows per SM"
)


def _one_row(x: torch.Tensor, *_: Any, **__: Any) -> bool:
    return x.dim() >= 1 and x.numel() == x.shape[-1]  # M = 1: the fused dequant-GEMV


def _gptq_gemv(
    x: torch.Tensor,
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    g_idx: torch.Tensor,
    bits: int = 4,
    *_: Any,
    **__: Any,
) -> bool:
    return _one_row(x) and bits == 4


def _gptq_int4(
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    g_idx: torch.Tensor,
    bits: int = 4,
    *_: Any,
    **__: Any,
) -> bool:
    return bits == 4


def _moe_route_fits(router_logits: torch.Tensor, top_k: int, *_: Any) -> bool:
    return cuda_moe.supports(router_logits.shape[1], top_k)


def _moe_experts_fit(
    x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor
) -> bool:
    return cuda_moe.supports(gate_up.shape[0], ids.shape[1])


def _gdn_fits(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    **_: Any,
) -> bool:
    return cuda_gdn.supports(q, k, v) and state.is_contiguous()


def _gdn_chunked_fits(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    chunk_size: int,
    **_: Any,
) -> bool:
    return cuda_gdn.supports_chunked(q, k, v, chunk_size)


def _group(q: torch.Tensor, k_cache: torch.Tensor) -> int:
    return q.shape[1] // k_cache.shape[2]


def _attn(pred: Callable[[int, int, torch.dtype], bool]) -> Callable[..., bool]:
    """A predicate over (head_dim, group, dtype) as one over paged_decode_attention's arguments."""

    def supports(q: torch.Tensor, k_cache: torch.Tensor, *_: Any, **__: Any) -> bool:
        return pred(q.shape[2], _group(q, k_cache), q.dtype)

    return supports


_PA = cuda_paged_attn
_SWAP_GROUPS = (1, 2, 4, 8)


def _splitkv_fits(d: int, group: int, dtype: torch.dtype) -> bool:
    return _PA.supported(_PA.GQA, d, 1, dtype)  # the split-KV kernel's head dims and dtypes


# --- arm kernels that adapt an op's arguments to a binding ------------------------------------------------
def _paged_arm(arm: int) -> Callable[..., torch.Tensor]:
    def kernel(
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        block_tables: torch.Tensor,
        context_lens: torch.Tensor,
        scale: float,
        sliding_window: int | None = None,
    ) -> torch.Tensor:
        return _PA.paged_decode_attention(
            q, k_cache, v_cache, block_tables, context_lens, scale, sliding_window, arm=arm
        )

    return kernel


def _tiled_variant(fits: str, **mode: bool) -> tuple[Callable[..., bool], Callable[..., torch.Tensor]]:
    """A variant of the tiled arm: its predicate (the tiled arm's shapes, and `cuda_tiled.<fits>`, looked up at
    call time, for what else it needs: its arrival counters ready, its grid resident) and its kernel
    (`cuda_tiled.decode(**mode)`). The predicate refuses a shape the binding would hand to the plain two passes
    (no ready counters: first use under graph capture), so the counters name the kernel that ran."""

    def supports(
        q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor, *_: Any, **__: Any
    ) -> bool:
        shape_ok = cuda_tiled.supported(q.shape[2], _group(q, k_cache), q.dtype)
        return shape_ok and bool(getattr(cuda_tiled, fits)(q, k_cache, block_tables))

    def kernel(
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        block_tables: torch.Tensor,
        context_lens: torch.Tensor,
        scale: float,
        sliding_window: int | None = None,
    ) -> torch.Tensor:
        return cuda_tiled.decode(q, k_cache, v_cache, block_tables, context_lens, scale, sliding_window, **mode)

    return supports, kernel


def _onepass_fits(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor, *_: Any, **__: Any
) -> bool:
    """The one-pass arm's shapes and, with several splits, ready arrival counters (else the call would fail)."""
    return cuda_onepass.fits(q, k_cache, block_tables)


_tiled_fused_fits, _tiled_fused = _tiled_variant("fused_fits", fused=True)  # the one launch
_tiled_pipelined_fits, _tiled_pipelined = _tiled_variant("pipelined_fits", pipelined=True)  # the pipelined P.V
_tiled_pdl_fits, _tiled_pipelined_pdl = _tiled_variant("pdl_fits", pipelined=True, pdl=True)  # ... chained


def _splitkv(swap: bool) -> Callable[..., torch.Tensor]:
    """Split-KV sized from the tables' static capacity, not context_lens' values: no host read, capturable."""

    def kernel(
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        block_tables: torch.Tensor,
        context_lens: torch.Tensor,
        scale: float,
        sliding_window: int | None = None,
    ) -> torch.Tensor:
        return cuda_splitkv.decode(
            q,
            k_cache,
            v_cache,
            block_tables,
            context_lens,
            scale,
            sliding_window,
            swap=swap,
            max_context=cuda_splitkv.capacity(block_tables, k_cache),
        )

    return kernel


def _prefill_mma_fits(q: torch.Tensor, *_: Any, **__: Any) -> bool:
    return cuda_prefill.supported(q.shape[2], q.dtype)


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
    return cuda_prefill.prefill(
        q, k.contiguous(), v.contiguous(), _device_lens(q, device_lens, seq_lens), scale, sliding_window
    )


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
    return cuda_prefill.extend(q, k_cache, v_cache, block_tables.to(torch.int32), lens, scale, sliding_window)


_DECODE_ROWS_WS = 1 << 26  # fp32 elements of the generic decode kernel's logits workspace the arm may take


def _decode_rows_fits(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor, *_: Any, **__: Any
) -> bool:
    cap = block_tables.shape[1] * k_cache.shape[1]
    return _PA.supported(_PA.GENERIC, q.shape[2], 1, q.dtype) and q.shape[0] * q.shape[1] * cap <= _DECODE_ROWS_WS


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
    generic decode kernel, which takes fp32; per-token tables and lengths built on the device, no host read."""
    seq, ctx = decode_row_lens(_device_lens(q, device_lens, seq_lens, prefix_lens), q.shape[0])
    tables = block_tables[seq].to(torch.int32)
    return _PA.paged_decode_attention(
        q.contiguous(), k_cache, v_cache, tables, ctx, scale, sliding_window, arm=_PA.GENERIC
    )


def decode_row_lens(lens: torch.Tensor, tokens: int) -> tuple[torch.Tensor, torch.Tensor]:  # each [tokens]
    """Per packed token of a varlen batch (lens: [2, seqs], new and cached tokens): its sequence (int64) and its
    context as a decode row, its position + 1 (int32). Device ops only, no host read."""
    lens = lens.long()
    seq = torch.repeat_interleave(torch.arange(lens.shape[1], device=lens.device), lens[0], output_size=tokens)
    first = torch.cumsum(lens[0], 0) - lens[0]  # each sequence's first packed token
    ctx = lens[1][seq] + torch.arange(tokens, device=lens.device) - first[seq] + 1
    return seq, ctx.to(torch.int32)


def _unfiltered(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    seeds: torch.Tensor,
    steps: torch.Tensor,
    filtered: bool = True,
) -> bool:
    return not filtered and logits.stride(-1) == 1


def _sample_kernel(
    logits: torch.Tensor,
    top_k: int | torch.Tensor,
    top_p: float | torch.Tensor,
    temperature: float | torch.Tensor,
    generator: torch.Generator,
) -> torch.Tensor:
    ks, ps, ts = sample.sampling_params(logits, top_k, top_p, temperature)
    # the kernel's counter-based stream is seeded from the generator, which advances as a draw would
    seed = int(torch.randint(0, 2**63 - 1, (1,), generator=generator))
    return cuda_sample.sample_top_k_top_p(logits, ks, ps, ts, seed)


def _dequant_nvfp4_kernel(
    packed: torch.Tensor, block_scales: torch.Tensor, global_scale: torch.Tensor | float, dtype: torch.dtype
) -> torch.Tensor:
    gs = quant.nvfp4_global_scale(global_scale, packed.device)
    return cuda_quant.dequant_nvfp4(packed, block_scales, gs, dtype)


class _TableOps:
    """The table's ops under one snapshot, by name: the parts over which a composite arm runs its reference's glue.
    `instead` names another op of the table for a part ({"linear": "linear_silu_mul"}); `under` gives a part other
    flags ({"linear": _weights_just_written}). Each op is this module's name for it, looked up at the call."""

    def __init__(
        self,
        snapshot: FlagSnapshot,
        instead: dict[str, str],
        under: dict[str, Callable[[FlagSnapshot], FlagSnapshot]],
    ) -> None:
        self.snapshot, self.instead, self.under = snapshot, instead, under

    def __getattr__(self, name: str) -> Callable[..., Any]:
        op = self.instead.get(name, name)
        if op not in TABLE:
            raise AttributeError(f"no op {op!r} in the kernel table")
        flags = self.under[name](self.snapshot) if name in self.under else self.snapshot
        return partial(globals()[op], flags)


def _by_parts(
    glue: Callable[..., R],
    *,
    instead: dict[str, str] | None = None,
    under: dict[str, Callable[[FlagSnapshot], FlagSnapshot]] | None = None,
) -> Callable[..., R]:
    """A composite arm's kernel: `glue(parts, *args)` from engine/ops (a composite reference's `.glue`) over the
    table's own ops, each choosing its arm under the snapshot (see `_TableOps` for `instead` and `under`)."""
    swaps, flags = instead or {}, under or {}

    def kernel(snapshot: FlagSnapshot, *args: Any, **kwargs: Any) -> R:
        return glue(_TableOps(snapshot, swaps, flags), *args, **kwargs)

    told = [f"{part}={op}" for part, op in swaps.items()] + [f"{part} under {f.__name__}" for part, f in flags.items()]
    kernel.__name__ = kernel.__qualname__ = f"by_parts({', '.join([glue.__qualname__, *told])})"
    return kernel


def _weights_just_written(snapshot: FlagSnapshot) -> FlagSnapshot:
    """The flags for a linear whose W the kernel before it wrote: a programmatic-dependent GEMV issues its W
    loads before `griddepcontrol.wait`, so it may read W only when no kernel in flight writes it."""
    return snapshot.with_(VT_GEMV_PDL=False) if snapshot.enabled("VT_GEMV_PDL") else snapshot


_PDL = gated_by("VT_GEMV_PDL")


def _with_pdl(name: str, flags: tuple[str, ...], supports: Callable[..., bool], needs: str, kernel: Callable) -> list:
    """A GEMV arm after its programmatic dependent launch: `<name>_pdl`, gated by VT_GEMV_PDL too (before the
    last flag, VT_GEMV), with the same support and the kernel called with pdl=True."""
    with_pdl = (*flags[:-1], *_PDL, flags[-1])
    return [
        Arm(f"{name}_pdl", with_pdl, supports, needs, partial(kernel, pdl=True)),
        Arm(name, flags, supports, needs, kernel),
    ]


# --- the table --------------------------------------------------------------------------------------------
KERNEL = "a CUDA tensor"  # the needs of an arm that takes every CUDA input the op's check accepts


def _cuda(
    reference: Callable[P, R],
    check: Callable[P, None],
    flags: tuple[str, ...],
    kernel: Callable[..., Any],
    supports: Callable[..., bool] = _any,
    needs: str = KERNEL,
) -> Op[P, R]:
    """An op with one arm, "cuda" (its family's binding), gated by `flags`: by default it takes every CUDA input that
    the op's check accepts."""
    return Op(reference, check, [Arm("cuda", flags, supports, needs, kernel)])


linear = Op(
    gemv.linear,
    gemv.check_linear,
    [
        *_with_pdl(
            "gemv_stream", gated_by("VT_GEMV_STREAM", "VT_GEMV"), _gemv_stream, _STREAM_NEEDS, cuda_stream.linear
        ),
        *_with_pdl(
            "gemv_persistent",
            gated_by("VT_GEMV_PERSISTENT", "VT_GEMV"),
            _gemv_persistent,
            _PERSISTENT_NEEDS,
            partial(cuda_gemv.linear, persistent=True),
        ),
        *_with_pdl(
            "gemv",
            gated_by("VT_GEMV"),
            _gemv_rows,
            f"at most {cuda_gemv.MAX_ROWS} rows and a row-major weight",
            cuda_gemv.linear,
        ),
    ],
)
embedding = Op(gemv.embedding, gemv.check_embedding)
rms_norm = _cuda(norm.rms_norm, norm.check_rms_norm, gated_by("VT_NORM_KERNEL"), cuda_norm.rms_norm)
fused_add_rms_norm = _cuda(
    norm.fused_add_rms_norm, norm.check_fused_add_rms_norm, gated_by("VT_NORM_KERNEL"), cuda_norm.fused_add_rms_norm
)
qk_norm = _cuda(norm.qk_norm, norm.check_qk_norm, gated_by("VT_NORM_KERNEL"), cuda_norm.rms_norm)
apply_rope_neox = _cuda(
    rope.apply_rope_neox, rope.check_apply_rope_neox, gated_by("VT_ROPE_KERNEL"), cuda_rope.apply_rope_neox
)
qk_norm_rope = Op(
    rope.qk_norm_rope,
    rope.check_qk_norm_rope,
    [
        Arm("fused", gated_by("VT_QK_NORM_ROPE_FUSED"), _any, KERNEL, cuda_rope.qk_norm_rope),
        Arm("norm_then_rope", gated_by(), _any, KERNEL, _by_parts(rope.qk_norm_rope.glue), composite=True),
    ],
)
silu_and_mul = _cuda(act.silu_and_mul, act.check_silu_and_mul, gated_by("VT_ACT_KERNEL"), cuda_act.silu_and_mul)
# its kernel does not range-check slot values
store_kv = _cuda(kv_store.store_kv, kv_store.check_store_kv, gated_by(), cuda_kv_store.store_kv)
_PREFILL_MMA_NEEDS = f"bf16/fp16, head_dim in {cuda_prefill.HEAD_DIMS}"
prefill_attention = Op(
    paged_attn.prefill_attention,
    paged_attn.check_prefill_attention,
    [
        Arm("mma", gated_by("VT_PREFILL_ATTN"), _prefill_mma_fits, _PREFILL_MMA_NEEDS, _prefill_mma),
    ],
)
# The varlen kernel on tensor cores, then (fp32, small steps) one generic decode row per new token.
extend_attention = Op(
    paged_attn.extend_attention,
    paged_attn.check_extend_attention,
    [
        Arm("mma", gated_by("VT_PREFILL_ATTN"), _prefill_mma_fits, _PREFILL_MMA_NEEDS, _extend_mma),
        Arm(
            "decode_rows",
            gated_by("VT_PREFILL_ATTN"),
            _decode_rows_fits,
            f"head_dim at most 256, a multiple of 8, tokens x heads x table capacity at most {_DECODE_ROWS_WS}",
            _extend_decode_rows,
        ),
    ],
)
# Precedence: the one-pass arm (OFF by default; an online softmax, held to the fp32 reference), the one-launch
# tiled arm and the pipelined two passes (the pipelined P.V is ON, so it is the default choice), tiled, then split-KV (with the GQA group swap where it is compiled), then the GQA-fused and
# warp-split-KV arms, then the generic kernel.
paged_decode_attention = Op(
    paged_attn.paged_decode_attention,
    paged_attn.check_paged_decode_attention,
    [
        Arm(
            "tiled_onepass",
            gated_by("VT_ATTN_ONEPASS", "VT_ATTN_TILED"),
            _onepass_fits,
            f"bf16/fp16, head_dim in {cuda_onepass.HEAD_DIMS}, at most {cuda_onepass.MAX_GROUP} query heads per KV "
            "head; with several KV splits, ready arrival counters",
            cuda_onepass.decode,
            razor=FP32_PROBS_RAZOR,
        ),
        Arm(
            "tiled_fused",
            gated_by("VT_ATTN_TILED_FUSED", "VT_ATTN_TILED"),
            _tiled_fused_fits,
            "the tiled arm's shapes, several KV splits, scores in shared memory and a grid resident at once",
            _tiled_fused,
        ),
        Arm(
            "tiled_pipelined_pdl",
            gated_by("VT_ATTN_PDL", "VT_ATTN_PV_PIPELINED", "VT_ATTN_TILED"),
            _tiled_pdl_fits,
            "the tiled arm's shapes; with several KV splits, ready arrival counters; at most "
            f"{cuda_tiled.PDL_BLOCKS_PER_SM} blocks per SM (both passes' grids resident)",
            _tiled_pipelined_pdl,
        ),
        Arm(
            "tiled_pipelined",
            gated_by("VT_ATTN_PV_PIPELINED", "VT_ATTN_TILED"),
            _tiled_pipelined_fits,
            "the tiled arm's shapes; with several KV splits, ready arrival counters",
            _tiled_pipelined,
        ),
        Arm(
            "tiled",
            gated_by("VT_ATTN_TILED"),
            _attn(cuda_tiled.supported),
            f"bf16/fp16, head_dim in {cuda_tiled.HEAD_DIMS}, at most {cuda_tiled.MAX_GROUP} query heads per KV head",
            cuda_tiled.decode,
        ),
        Arm(
            "splitkv_swap",
            gated_by("VT_ATTN_SPLITKV_GQA_SWAP", "VT_ATTN_SPLITKV"),
            _attn(lambda d, g, t: _splitkv_fits(d, g, t) and g in _SWAP_GROUPS),
            f"fp32/bf16, head_dim 64/128/256, {_SWAP_GROUPS} query heads per KV head",
            _splitkv(swap=True),
        ),
        Arm(
            "splitkv",
            gated_by("VT_ATTN_SPLITKV"),
            _attn(_splitkv_fits),
            "fp32/bf16, head_dim 64/128/256",
            _splitkv(swap=False),
        ),
        Arm(
            "gqa",
            gated_by("VT_ATTN_DECODE_GQA"),
            _attn(lambda d, g, t: _PA.supported(_PA.GQA, d, g, t)),
            "fp32/bf16, head_dim 64/128/256, 1/2/4/8 query heads per KV head",
            _paged_arm(_PA.GQA),
        ),
        Arm(
            "warp",
            gated_by("VT_ATTN_DECODE_OPT"),
            _attn(lambda d, g, t: d == 256 and _PA.supported(_PA.WARP, d, g, t)),
            "fp32/bf16, head_dim 256",
            _paged_arm(_PA.WARP),
        ),
        Arm(
            "warp_d128",
            gated_by("VT_ATTN_DECODE_D128", "VT_ATTN_DECODE_OPT"),
            _attn(lambda d, g, t: d == 128 and _PA.supported(_PA.WARP, d, g, t)),
            "fp32/bf16, head_dim 128",
            _paged_arm(_PA.WARP),
        ),
        Arm(
            "generic",
            gated_by(),
            _attn(lambda d, g, t: _PA.supported(_PA.GENERIC, d, g, t)),
            "head_dim at most 256, a multiple of 8",
            _paged_arm(_PA.GENERIC),
            notice=True,  # about 12x slower than the tiled arm: a model that lands here is told why
        ),
    ],
)
greedy_argmax = _cuda(
    sample.greedy_argmax, sample.check_greedy_argmax, gated_by("VT_ARGMAX_KERNEL"), cuda_sample.greedy_argmax
)
sample_top_k_top_p = _cuda(
    sample.sample_top_k_top_p, sample.check_sample_top_k_top_p, gated_by("VT_SAMPLE_KERNEL"), _sample_kernel
)
# the serving sampler's draw (engine/sampler.py): the fused Gumbel-max kernel takes the unfiltered rows
sample_rows = Op(
    sample.sample_rows,
    sample.check_sample_rows,
    [
        Arm(
            "gumbel",
            gated_by("VT_SAMPLE_ROWS_KERNEL"),
            _unfiltered,
            "filtered=False (no row restricts top-k or top-p) and a unit-stride vocabulary",
            cuda_sample_rows.sample_rows,
        ),
    ],
)
moe_route = _cuda(
    moe.moe_route,
    moe.check_moe_route,
    gated_by("VT_MOE_KERNELS"),
    cuda_moe.route,
    _moe_route_fits,
    f"at most {cuda_moe.MAX_ROUTE_EXPERTS} experts, top_k at most {cuda_moe.MAX_TOP_K}",
)
moe_experts = _cuda(
    moe.moe_experts,
    moe.check_moe_experts,
    gated_by("VT_MOE_KERNELS"),
    cuda_moe.experts,
    _moe_experts_fit,
    f"at most {cuda_moe.MAX_ROUTE_EXPERTS} experts, top_k at most {cuda_moe.MAX_TOP_K}",
)
# Qwen3-Next (engine/model/qwen3_next.py): its norms, gates, convolution and the chunked prefill of the recurrence
rms_norm_offset = Op(norm.rms_norm_offset, norm.check_rms_norm_offset)
sigmoid_gate = Op(act.sigmoid_gate, act.check_sigmoid_gate)
gdn_gating = Op(gdn.gdn_gating, gdn.check_gdn_gating)
causal_conv1d = Op(gdn.causal_conv1d, gdn.check_causal_conv1d)
causal_conv1d_update = Op(gdn.causal_conv1d_update, gdn.check_causal_conv1d_update)
gated_rms_norm = Op(gdn.gated_rms_norm, gdn.check_gated_rms_norm)
gated_delta_chunked = _cuda(
    gdn.gated_delta_chunked,
    gdn.check_gated_delta_chunked,
    gated_by("VT_GDN_CHUNKED_KERNEL"),
    cuda_gdn.chunked,
    _gdn_chunked_fits,
    f"one dtype for q/k/v, key dim at most {cuda_gdn.MAX_HEAD_DIM_K}, chunks of at most {cuda_gdn.MAX_CHUNK}",
)
gated_delta_decode = _cuda(
    gdn.gated_delta_decode,
    gdn.check_gated_delta_decode,
    gated_by("VT_GDN_KERNEL"),
    cuda_gdn.decode,
    _gdn_fits,
    f"one dtype for q/k/v, key dim at most {cuda_gdn.MAX_HEAD_DIM_K}, a contiguous state",
)
dequant_awq = _cuda(quant.dequant_awq, quant.check_dequant_awq, gated_by("VT_DEQUANT_KERNEL"), cuda_quant.dequant_awq)
dequant_gptq = _cuda(
    quant.dequant_gptq,
    quant.check_dequant_gptq,
    gated_by("VT_DEQUANT_KERNEL"),
    cuda_quant.dequant_gptq,
    _gptq_int4,
    "4-bit weights",
)
dequant_nvfp4 = _cuda(
    quant.dequant_nvfp4, quant.check_dequant_nvfp4, gated_by("VT_DEQUANT_KERNEL"), _dequant_nvfp4_kernel
)
# The dequant-then-linear arms run the table's dequant and linear ops, each with its own arms.
_DEQUANT_THEN_LINEAR = {  # their linear never a programmatic dependent of the dequant writing its W
    m: _by_parts(getattr(quant, f"{m}_linear").glue, under={"linear": _weights_just_written})
    for m in ("awq", "gptq", "nvfp4")
}
awq_linear = Op(
    quant.awq_linear,
    quant.check_awq_linear,
    [
        Arm("gemv", gated_by("VT_DEQUANT_GEMV"), _one_row, "one row of x", cuda_quant.awq_linear),
        Arm("dequant_then_linear", gated_by(), _any, KERNEL, _DEQUANT_THEN_LINEAR["awq"], composite=True),
    ],
)
gptq_linear = Op(
    quant.gptq_linear,
    quant.check_gptq_linear,
    [
        Arm("gemv", gated_by("VT_DEQUANT_GEMV"), _gptq_gemv, "one row of x, 4-bit weights", cuda_quant.gptq_linear),
        Arm("dequant_then_linear", gated_by(), _any, KERNEL, _DEQUANT_THEN_LINEAR["gptq"], composite=True),
    ],
)
nvfp4_linear = Op(
    quant.nvfp4_linear,
    quant.check_nvfp4_linear,
    [
        Arm("gemv", gated_by("VT_DEQUANT_GEMV"), _one_row, "one row of x", cuda_quant.nvfp4_linear),
        Arm("dequant_then_linear", gated_by(), _any, KERNEL, _DEQUANT_THEN_LINEAR["nvfp4"], composite=True),
    ],
)


# --- the decode step's fused launches (ENGINE-PERF): each op's last arm runs the table's own ops one by one ------
def _norm_gemv_fits(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    norm_weight: torch.Tensor,
    eps: float,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> bool:
    k = x.shape[-1]
    rows = [t.reshape(-1, k) for t in (x, residual) if t is not None]
    return cuda_gemv.prologue_fits(rows[0].shape[0], k, weight, *rows)


def _act_gemv_fits(gate_up: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> bool:
    g = gate_up.reshape(-1, gate_up.shape[-1])
    return cuda_gemv.prologue_fits(g.shape[0], weight.shape[1], weight, g)


def _qkv_fits(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *_: Any, **__: Any) -> bool:
    return q.shape[-1] <= cuda_rope.MAX_FUSED_HEAD_DIM and all(t.stride(-1) == 1 for t in (q, k, v))


def _glu_fits(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> bool:
    x2 = x.reshape(-1, x.shape[-1])
    return cuda_gemv.glu_fits(x2.shape[0], weight, x2)


def _norm_stream_fits(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    norm_weight: torch.Tensor,
    eps: float,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    glu: bool = False,
) -> bool:
    k = x.shape[-1]
    rows = [t.reshape(-1, k) for t in (x, residual) if t is not None]
    return cuda_stream.fits(rows[0].shape[0], weight, *rows, glu=glu)


def _glu_stream_fits(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> bool:
    x2 = x.reshape(-1, x.shape[-1])
    return cuda_stream.fits(x2.shape[0], weight, x2, glu=True)


def _norm_glu_fits(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    norm_weight: torch.Tensor,
    eps: float,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> bool:
    return _norm_gemv_fits(x, residual, norm_weight, eps, weight, bias) and _glu_fits(x, weight, bias)


_GLU_NEEDS = (
    f"1 to {cuda_gemv.MAX_ROWS} rows in {cuda_gemv.MAX_STAGED_BYTES} bytes, 16-byte rows, a row-major gate/up W "
    f"with at least {cuda_gemv.SPLIT_BELOW_WARPS_PER_SM} rows per SM"
)
_PROLOGUE_NEEDS = f"1 to {cuda_gemv.MAX_ROWS} rows in {cuda_gemv.MAX_STAGED_BYTES} bytes, 16-byte rows, a row-major W"
add_rms_norm_linear = Op(
    gemv.add_rms_norm_linear,
    gemv.check_add_rms_norm_linear,
    [
        *_with_pdl(
            "prologue_stream",
            gated_by("VT_NORM_GEMV", "VT_GEMV_STREAM", "VT_GEMV"),
            _norm_stream_fits,
            _STREAM_NEEDS,
            cuda_stream.add_rms_norm_linear,
        ),
        *_with_pdl(
            "prologue",
            gated_by("VT_NORM_GEMV", "VT_GEMV"),
            _norm_gemv_fits,
            _PROLOGUE_NEEDS,
            cuda_gemv.add_rms_norm_linear,
        ),
        Arm("norm_then_linear", gated_by(), _any, KERNEL, _by_parts(gemv.add_rms_norm_linear.glue), composite=True),
    ],
)
silu_mul_linear = Op(
    gemv.silu_mul_linear,
    gemv.check_silu_mul_linear,
    [
        *_with_pdl(
            "prologue", gated_by("VT_ACT_GEMV", "VT_GEMV"), _act_gemv_fits, _PROLOGUE_NEEDS, cuda_gemv.silu_mul_linear
        ),
        Arm("act_then_linear", gated_by(), _any, KERNEL, _by_parts(gemv.silu_mul_linear.glue), composite=True),
    ],
)
linear_silu_mul = Op(
    gemv.linear_silu_mul,
    gemv.check_linear_silu_mul,
    [
        *_with_pdl(
            "glu_stream",
            gated_by("VT_GLU_GEMV", "VT_GEMV_STREAM", "VT_GEMV"),
            _glu_stream_fits,
            _STREAM_NEEDS,
            partial(cuda_stream.linear, glu=True),
        ),
        *_with_pdl("glu", gated_by("VT_GLU_GEMV", "VT_GEMV"), _glu_fits, _GLU_NEEDS, cuda_gemv.linear_silu_mul),
        Arm("linear_then_act", gated_by(), _any, KERNEL, _by_parts(gemv.linear_silu_mul.glue), composite=True),
    ],
)
add_rms_norm_linear_silu_mul = Op(
    gemv.add_rms_norm_linear_silu_mul,
    gemv.check_add_rms_norm_linear_silu_mul,
    [
        *_with_pdl(
            "prologue_glu_stream",
            gated_by("VT_NORM_GEMV", "VT_GLU_GEMV", "VT_GEMV_STREAM", "VT_GEMV"),
            partial(_norm_stream_fits, glu=True),
            _STREAM_NEEDS,
            partial(cuda_stream.add_rms_norm_linear, glu=True),
        ),
        *_with_pdl(
            "prologue_glu",
            gated_by("VT_NORM_GEMV", "VT_GLU_GEMV", "VT_GEMV"),
            _norm_glu_fits,
            _GLU_NEEDS,
            partial(cuda_gemv.add_rms_norm_linear, glu=True),
        ),
        Arm(
            "norm_gemv_then_act",
            gated_by("VT_NORM_GEMV"),
            _any,
            KERNEL,
            _by_parts(gemv.add_rms_norm_linear_silu_mul.glue),
            composite=True,
        ),
        Arm(  # the pre-norm, then the GLU GEMV op
            "norm_then_glu",
            gated_by(),
            _any,
            KERNEL,
            _by_parts(gemv.add_rms_norm_linear.glue, instead={"linear": "linear_silu_mul"}),
            composite=True,
        ),
    ],
)
qkv_norm_rope_store = Op(
    rope.qkv_norm_rope_store,
    rope.check_qkv_norm_rope_store,
    [
        Arm(
            "fused",
            gated_by("VT_QKV_ROPE_STORE"),
            _qkv_fits,
            f"head_dim at most {cuda_rope.MAX_FUSED_HEAD_DIM}, contiguous last dims",
            cuda_rope.qkv_norm_rope_store,
        ),
        Arm("separate", gated_by(), _any, KERNEL, _by_parts(rope.qkv_norm_rope_store.glue), composite=True),
    ],
)


def quantized_linear(
    snapshot: FlagSnapshot,
    x: torch.Tensor,
    method: str,
    weights: dict[str, torch.Tensor],
    bias: torch.Tensor | None = None,
    group_size: int = 0,
    bits: int = 4,
    version: int = 1,
) -> torch.Tensor:  # x: [..., in_features] -> [..., out_features]
    """A quantized linear layer (engine/model/layers.py `QuantLinear`) as the table's `<method>_linear` op.

    `weights` are the layer's packed tensors under the engine's names. The op's arms decide: one row (M = 1)
    takes the fused dequant-GEMV under VT_DEQUANT_GEMV; more rows on CUDA dequantize (VT_DEQUANT_KERNEL)
    and then run the `linear` op; on the CPU the reference (engine/ops/quant.py) does both."""
    w = weights
    if method == "awq":
        return awq_linear(snapshot, x, w["qweight"], w["qzeros"], w["scales"], group_size, bias)
    if method == "gptq":
        return gptq_linear(snapshot, x, w["qweight"], w["qzeros"], w["scales"], w["g_idx"], bits, version, bias)
    if method == "nvfp4":
        return nvfp4_linear(snapshot, x, w["packed"], w["block_scales"], w["global_scale"], bias)
    raise ValueError(f"method: {method!r} is not a quantized linear (awq, gptq or nvfp4)")


TABLE: dict[str, Op[..., Any]] = {
    op.name: op
    for op in (
        linear,
        add_rms_norm_linear,
        silu_mul_linear,
        linear_silu_mul,
        add_rms_norm_linear_silu_mul,
        embedding,
        rms_norm,
        fused_add_rms_norm,
        qk_norm,
        apply_rope_neox,
        qk_norm_rope,
        qkv_norm_rope_store,
        silu_and_mul,
        store_kv,
        prefill_attention,
        extend_attention,
        paged_decode_attention,
        greedy_argmax,
        sample_top_k_top_p,
        sample_rows,
        moe_route,
        moe_experts,
        gated_delta_decode,
        rms_norm_offset,
        sigmoid_gate,
        gdn_gating,
        causal_conv1d,
        causal_conv1d_update,
        gated_rms_norm,
        gated_delta_chunked,
        dequant_awq,
        dequant_gptq,
        dequant_nvfp4,
        awq_linear,
        gptq_linear,
        nvfp4_linear,
    )
}

# One GEMM for q/k/v and one for gate/up per decoder layer (engine/model/qwen3.py).
merged_projections = Switch("merged_projections", gated_by("VT_MERGED_PROJ"), "merged")
# The gated MLP's activation in its gate/up GEMV's epilogue (engine/model/qwen3.py): the down GEMV then takes it.
glu_epilogue = Switch("glu_epilogue", gated_by("VT_GLU_GEMV"), "glu")
SWITCHES: dict[str, Switch] = {s.name: s for s in (merged_projections, glu_epilogue)}
