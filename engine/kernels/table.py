"""The kernel table's machinery: `Op`, `Arm`, the table, its counters and the flag snapshot's plumbing.

The table is per op its pure-torch reference and its ordered CUDA arms; every call goes through it. The ops live
one module per family beside this one (engine/kernels/<family>.py: its predicates, adapters and ops) and
engine/kernels/__init__.py registers them here and re-exports every name, so `from engine import kernels` reads
the table as one module.

The contract (what model code, gates and benchmarks may rely on):

- An `Op` joins one reference from `engine/ops/` (the semantics, runs anywhere), its entry check (the
  `check_<op>` beside the reference: shapes and dtypes, naming the tensor) and its `Arm`s in order. An
  `Arm` is a name, the flags that must all be on (`gated_by("VT_X", ...)`, from engine/flags.py), a `supports`
  predicate over the op's own arguments (shapes, dtypes, strides; a family names each `supports_<what>`; `needs`
  says it in words) and the kernel (a binding in `engine/cuda/`, called with the op's arguments). A `composite` arm's kernel takes the
  snapshot first, because it runs other ops of this table (dequant, then linear); `by_parts(glue)` makes
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
- An op's `by_name` arms are outside its precedence chain: no flag, never chosen by the default order. They are
  the arms the retire rule keeps because the kernel set this engine mirrors has them (docs/BENCHMARKS.md, "Arm
  outcomes"): reached by `run_arm`, or for a whole model run by a snapshot that names them (`naming(snapshot, op,
  arm)`): such a snapshot's op tries the named arm first (on a CUDA tensor, under VT_KERNELS, if the device has
  what it declares and it supports the inputs; else it counts the decline and goes down its chain).
- Device needs are declared, not probed by each binding: an `Arm` states the compute capability (`capability`,
  default the portable kernels' sm_80) and the opt-in shared memory per block (`smem_optin`) it needs, and the
  table checks them against one cached probe of the input's device (engine/cuda/device.py `probe`: capability,
  opt-in ceiling, SM count) before the arm's `supports`. A decline is counted with its reason in
  `COUNTS.declines[(op, arm, reason)]` ("no CUDA device", "sm_90 (cuda:0 is sm_80)", ...). `on_device(device)`
  makes the table take every CUDA input to be on `device` (a `Device` value) instead: what a test or a benchmark
  uses to ask what the table would choose on another GPU.
- An `Op` may have a `scope(snapshot, count)`: a context manager every call and `choose` run their arm choice and
  kernel in, for a setting of its arms that a flag selects without another arm (the paged decode attention's
  measured split table, VT_ATTN_SPLIT_TABLE): the bindings read it there, so it too comes from the snapshot alone.
  `run_arm` runs at the default flags' scope. A call (`count` true) in which the setting changed what ran is
  counted in `COUNTS.settings[(op, flag)]`, and `arms_ran(flag)` adds those calls: the flip protocol's "did it
  run" holds for a setting flag as for an arm's.
- `Op.injected`, when set, is an arm that takes every call whatever the flags and the device: a gate runs a
  peer in place of the op's arms with it (lab/gates/peer_attention.py), counted as `(op, its name)`.
- Every call is counted (`COUNTS`): `COUNTS.ran[(op, arm)]` (arm "reference" for the reference) and
  `COUNTS.fallbacks[(op, arm, needs)]` for each arm that was enabled but declined the inputs. Reset them
  with `reset_counts()`, read a copy with `counts()`, print them with `render_counts()`, and ask
  `arms_ran(flag)` how often an arm gated by a flag ran (the flip protocol fails on 0). Counts are Python
  calls: a replayed CUDA graph runs its captured arms without counting again.
- `quantized_linear(snapshot, x, method, weights, ...)` is a quantized layer's entry: it runs the
  `<method>_linear` op of the table (engine/model/layers.py `QuantLinear`).
- A new op is one `Op(...)` in its family's module, registered in `TABLE` by its name (the reference's name) by
  engine/kernels/__init__.py; a new arm is one `Arm(...)` in its op's list, in the place of its precedence.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Generic, ParamSpec, TypeVar

import torch

from engine.cuda.device import Device, probe_of
from engine.flags import FLAGS, FlagSnapshot

P = ParamSpec("P")
R = TypeVar("R")
REFERENCE_ARM = "reference"
PORTABLE = (8, 0)  # the oldest arch the portable kernels are built for (engine/cuda/arch_features.yaml)


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
    capability: tuple[int, int] = PORTABLE  # the compute capability the kernel needs at least
    smem_optin: int = 0  # the dynamic shared memory (bytes) a block of it needs to opt in to, at least
    # where the table takes it unasked, within `supports`: the range its A/B won (a case, or VT_ARM naming it, runs
    # it wherever `supports` holds); `takes_note` says which, the reason recorded when the range declines a call
    takes: Callable[..., bool] | None = None
    takes_note: str = ""

    def enabled(self, snapshot: FlagSnapshot) -> bool:
        return all(snapshot.enabled(f) for f in self.flags)

    def lacks(self, device: Device) -> str | None:
        """Why this arm cannot run on `device` (the reason counted for its decline), or None."""
        return device.lacks(self.capability, self.smem_optin)


@dataclass
class Counts:
    """Selection counters: which arm each op ran, and every enabled arm that declined (with its reason)."""

    ran: Counter[tuple[str, str]] = field(default_factory=Counter)  # (op, arm) -> calls
    fallbacks: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (op, arm, needs) -> calls
    # (op, arm, reason) -> calls an enabled arm declined because the device lacks what it declares it needs
    declines: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    # (op, flag) -> calls in which a setting flag of the op's scope changed what its arm launched
    settings: Counter[tuple[str, str]] = field(default_factory=Counter)

    def copy(self) -> Counts:
        return Counts(Counter(self.ran), Counter(self.fallbacks), Counter(self.declines), Counter(self.settings))

    def clear(self) -> None:
        self.ran.clear()
        self.fallbacks.clear()
        self.declines.clear()
        self.settings.clear()


COUNTS = Counts()
NOTICED: set[tuple[str, str, str]] = set()  # (op, declined arm, needs): each fall to a notice arm said once
_ON_DEVICE: ContextVar[Device | None] = ContextVar("on_device", default=None)


@contextmanager
def on_device(device: Device) -> Iterator[Device]:
    """Within it, the table takes every CUDA input to be on `device` rather than probing the input's own: a test
    or benchmark asks what the table would choose on another GPU (engine/cuda/device.py `Device`)."""
    token = _ON_DEVICE.set(device)
    try:
        yield device
    finally:
        _ON_DEVICE.reset(token)


def device_of(t: torch.Tensor) -> Device:
    """The device the table checks an arm's needs against for input `t`: `on_device`'s, else `t`'s own probe."""
    return _ON_DEVICE.get() or probe_of(t)


class Op(Generic[P, R]):
    """One row of the table: `op(snapshot, *args)` checks, picks the first enabled supported arm, counts, runs."""

    def __init__(
        self,
        reference: Callable[P, R],
        check: Callable[P, None],
        arms: Sequence[Arm] = (),
        by_name: Sequence[Arm] = (),
        scope: Callable[[FlagSnapshot, bool], AbstractContextManager[Any]] | None = None,
    ) -> None:
        self.name = reference.__name__
        self.reference = reference
        self.check = check
        self.arms = tuple(arms)  # the precedence chain
        self.by_name = tuple(by_name)  # outside the chain: run only when named (`run_arm`, `naming`)
        names = [a.name for a in (*self.arms, *self.by_name)]
        if len(set(names)) != len(names) or REFERENCE_ARM in names:
            raise ValueError(f"{self.name}: arm names must be unique and not {REFERENCE_ARM!r}: {names}")
        if any(a.flags for a in self.by_name):
            raise ValueError(f"{self.name}: a by-name arm has no flag (no default order reaches it)")
        # an arm that takes every call, whatever the flags and the device (a gate's peer, lab/gates/
        # peer_attention.py); set and cleared by the gate around its run, counted like any arm
        self.injected: Arm | None = None
        self._scope = scope

    def scope(self, snapshot: FlagSnapshot, count: bool = False) -> AbstractContextManager[Any]:
        """The context this op's arms choose and run in under `snapshot` (none unless the op declares one); with
        `count`, a setting that changed what ran is counted in `COUNTS.settings`."""
        return nullcontext() if self._scope is None else self._scope(snapshot, count)

    def __call__(self, snapshot: FlagSnapshot, *args: P.args, **kwargs: P.kwargs) -> R:
        self.check(*args, **kwargs)
        if self.injected is not None:
            COUNTS.ran[(self.name, self.injected.name)] += 1
            return self.injected.kernel(*args, **kwargs)
        if self._scope is None:  # most ops: no context to enter on every call
            return self._run(snapshot, args, kwargs)
        with self._scope(snapshot, True):
            return self._run(snapshot, args, kwargs)

    def _run(self, snapshot: FlagSnapshot, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
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
        with self.scope(snapshot):
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
        first: Any = args[0]
        lacking = arm.lacks(device_of(first)) if first.is_cuda else None
        if lacking is not None:
            raise ValueError(f"{self.name}: arm {name!r} needs {lacking}")
        with self.scope(FlagSnapshot.defaults()):
            if not arm.supports(*args, **kwargs):
                raise ValueError(f"{self.name}: arm {name!r} needs {arm.needs}")
            if arm.composite:
                return arm.kernel(FlagSnapshot.defaults(), *args, **kwargs)
            return arm.kernel(*args, **kwargs)

    def arm(self, name: str) -> Arm:
        for arm in (*self.arms, *self.by_name, *filter(None, [self.injected])):
            if arm.name == name:
                return arm
        known = ", ".join([a.name for a in (*self.arms, *self.by_name)] + [REFERENCE_ARM])
        raise KeyError(f"{self.name}: no arm {name!r} (arms: {known})")

    def _select(self, snapshot: FlagSnapshot, args: tuple[Any, ...], kwargs: dict[str, Any], count: bool) -> Arm | None:
        if not snapshot.kernels or not args[0].is_cuda:
            return None
        device = device_of(args[0])
        declined: list[tuple[str, str]] = []  # (arm, what it needs that this call lacks)
        named = snapshot.named.get(self.name)
        first = None if named is None else self.arm(named)
        chain = self.arms if first is None else (first, *[a for a in self.arms if a is not first])
        for i, arm in enumerate(chain):
            unasked = i > 0 or first is None  # a named arm runs whatever the flags and its range say
            if unasked and not arm.enabled(snapshot):
                continue
            lacking = arm.lacks(device)
            supported = lacking is None and arm.supports(*args, **kwargs)
            out_of_range = supported and unasked and arm.takes is not None and not arm.takes(*args, **kwargs)
            if supported and not out_of_range:
                if count and arm.notice:
                    self._notice(arm, declined)
                return arm
            reason = lacking or (arm.takes_note if out_of_range else arm.needs)
            if count and lacking is not None:
                COUNTS.declines[(self.name, arm.name, lacking)] += 1
            elif count:
                COUNTS.fallbacks[(self.name, arm.name, reason)] += 1
            declined.append((arm.name, reason))
        return None

    def _notice(self, taken: Arm, declined: list[tuple[str, str]]) -> None:
        """One stderr line per (op, declined arm, reason) in a process: the call fell to a slow arm."""
        for arm, needs in declined:
            key = (self.name, arm, needs)
            if key not in NOTICED:
                NOTICED.add(key)
                print(
                    f"engine: {self.name} falls to its {taken.name} arm: {arm} needs {needs} "
                    "(said once per process; the selection counters count every call)",
                    file=sys.stderr,
                )

    def __repr__(self) -> str:
        named = f"; by name: {', '.join(a.name for a in self.by_name)}" if self.by_name else ""
        return f"Op({self.name}: {', '.join(a.name for a in self.arms) or 'reference only'}{named})"


# The table by name: each family module declares its ops, engine/kernels/__init__.py registers them here (in the
# order a listing shows), where `call`, the counters and a composite arm's parts read them.
TABLE: dict[str, Op[..., Any]] = {}


def register(ops: Sequence[Op[..., Any]]) -> None:
    """Add ops to the table, by name; a name taken twice is an error."""
    for op in ops:
        if op.name in TABLE:
            raise ValueError(f"op {op.name!r} registered twice")
        TABLE[op.name] = op


def naming(snapshot: FlagSnapshot, op: str, arm: str) -> FlagSnapshot:
    """`snapshot` with `arm` of `op` named: that op tries it first, whatever the flags (an error names the op's
    arms when there is no such arm). How a gate or benchmark runs a by-name arm in a whole model or step."""
    if op not in TABLE:
        raise KeyError(f"no op {op!r} in the kernel table (ops: {', '.join(TABLE)})")
    TABLE[op].arm(arm)
    return snapshot.with_arm(op, arm)


def call(name: str, snapshot: FlagSnapshot, *args: Any, **kwargs: Any) -> Any:
    """`TABLE[name](snapshot, *args, **kwargs)`: the table's ops by name."""
    if name not in TABLE:
        raise KeyError(f"no op {name!r} in the kernel table (ops: {', '.join(TABLE)})")
    return TABLE[name](snapshot, *args, **kwargs)


# --- counters ---------------------------------------------------------------------------------------------
def reset_counts() -> None:
    COUNTS.clear()


def counts() -> Counts:
    """A copy of the selection counters as they stand."""
    return COUNTS.copy()


def arms_ran(flag: str, seen: Counts | None = None) -> int:
    """Calls of every arm gated by `flag`, and calls a setting `flag` changed (`COUNTS.settings`), in `seen`
    (default: now)."""
    seen = seen or COUNTS
    gated = {(op.name, a.name) for op in TABLE.values() for a in op.arms if flag in a.flags}
    settings = sum(n for (_, f), n in seen.settings.items() if f == flag)
    return sum(n for key, n in seen.ran.items() if key in gated) + settings


def ops_gated_by(flag: str) -> set[str]:
    """The ops that have an arm gated by `flag`."""
    return {op.name for op in TABLE.values() for a in op.arms if flag in a.flags}


def razors_gated_by(flag: str, snapshot: FlagSnapshot) -> dict[str, Razor]:
    """The razor settings of the arms gated by `flag` that `snapshot` enables, by `op/arm`."""
    found = {}
    for op in TABLE.values():
        for arm in op.arms:
            if flag in arm.flags and arm.enabled(snapshot):
                found[f"{op.name}/{arm.name}"] = arm.razor
    return found


def razors_ran(ran: Mapping[tuple[str, str], int]) -> dict[str, Razor]:
    """The razor settings other than eager of the arms that ran (`Counts.ran`), by `op/arm`: what judges a run
    whose arms no `--require-arm` named (a default arm that keeps fp32 probabilities is judged as its flip was)."""
    found = {}
    for (op, name), n in ran.items():
        arms = (*TABLE[op].arms, *TABLE[op].by_name) if n and op in TABLE else ()  # the reference and peers: none
        arm = next((a for a in arms if a.name == name), None)
        if arm is not None and arm.razor != EAGER_RAZOR:
            found[f"{op}/{name}"] = arm.razor
    return found


def razors_enabled(snapshot: FlagSnapshot) -> dict[str, Razor]:
    """The razor settings other than eager of the arms `snapshot` enables, by `op/arm`: those a run may take."""
    return {
        f"{op.name}/{arm.name}": arm.razor
        for op in TABLE.values()
        for arm in op.arms
        if arm.razor != EAGER_RAZOR and arm.enabled(snapshot)
    }


def op_calls(ops: set[str], seen: Counts | None = None) -> int:
    """Calls of `ops` in `seen`, whichever arm ran them (the reference included)."""
    seen = seen or COUNTS
    return sum(n for (op, _), n in seen.ran.items() if op in ops)


def flags_of(op: str, arm: str) -> tuple[str, ...]:
    """The flags that gate one arm of the table ((), for the reference and for an arm injected by a gate)."""
    if op in TABLE and any(a.name == arm for a in TABLE[op].arms):
        return TABLE[op].arm(arm).flags
    return ()


def render_counts(seen: Counts | None = None) -> str:
    """One line per (op, arm) that ran, then one per fallback, then one per device decline:
    `rms_norm/cuda 12 [VT_NORM_KERNEL]`, `fallback linear/gemv 3: needs ...`, `declined linear/gemv_stream 3: needs
    sm_90 (cuda:0 is sm_80)`."""
    seen = seen or COUNTS
    if not seen.ran:
        return "arms: none ran"
    lines = ["arms (calls; a replayed CUDA graph is not counted again):"]
    for (op, arm), n in sorted(seen.ran.items()):
        gated = flags_of(op, arm)
        by_name = op in TABLE and any(a.name == arm for a in TABLE[op].by_name)
        lines.append(f"  {op}/{arm} {n}" + (f" [{' '.join(gated)}]" if gated else " [by name]" if by_name else ""))
    for (op, arm, needs), n in sorted(seen.fallbacks.items()):
        lines.append(f"  fallback {op}/{arm} {n}: needs {needs}")
    for (op, arm, reason), n in sorted(seen.declines.items()):
        lines.append(f"  declined {op}/{arm} {n}: needs {reason}")
    for (op, flag), n in sorted(seen.settings.items()):
        lines.append(f"  setting {op} {n}: {flag} changed what its arm launched")
    return "\n".join(lines)


# --- the parts the families build their rows from: the predicate that takes any input, composite arms, one-arm ops
def supports_any(*_: Any, **__: Any) -> bool:
    return True


class _TableOps:
    """The table's ops under one snapshot, by name: the parts over which a composite arm runs its reference's glue.
    `instead` names another op of the table for a part ({"linear": "linear_silu_mul"}); `under` gives a part other
    flags ({"linear": weights_just_written}). Each op is looked up in `TABLE` at the call."""

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
        return partial(TABLE[op], flags)


def by_parts(
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


def weights_just_written(snapshot: FlagSnapshot) -> FlagSnapshot:
    """The flags for a linear whose W the kernel before it wrote: a programmatic-dependent GEMV issues its W
    loads before `griddepcontrol.wait`, so it may read W only when no kernel in flight writes it."""
    return snapshot.with_(VT_GEMV_PDL=False) if snapshot.enabled("VT_GEMV_PDL") else snapshot


KERNEL = "a CUDA tensor"  # the needs of an arm that takes every CUDA input the op's check accepts


def cuda_op(
    reference: Callable[P, R],
    check: Callable[P, None],
    flags: tuple[str, ...],
    kernel: Callable[..., Any],
    supports: Callable[..., bool] = supports_any,
    needs: str = KERNEL,
) -> Op[P, R]:
    """An op with one arm, "cuda" (its family's binding), gated by `flags`: by default it takes every CUDA input that
    the op's check accepts (on a device the portable kernels run on)."""
    return Op(reference, check, [Arm("cuda", flags, supports, needs, kernel)])
