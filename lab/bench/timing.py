"""Timing one callable over rotating input sets: CUDA-graph replay or an eager loop between CUDA events on a
GPU, a host clock elsewhere.

Inputs rotate so that repeated calls do not keep hitting the L2 cache: consecutive calls take the next input
set, and enough sets are made that one cycle moves at least twice the cache (see `sets_for`).

Graph mode (the default on CUDA) captures one CUDA graph that calls the op over whole cycles of the sets and
times its replay, divided by the calls: what a CUDA-graph decode step pays, with no Python, binding checks or
allocation on the timed path. An op that refuses capture (a host sync, a compiled kernel that is not
capturable) falls back to the eager loop, and the timer says so (`mode`, `note`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

L2_BYTES_GUESS = 64 << 20  # H200: 60 MB of L2; the rotation covers at least twice this
GRAPH_MIN_CALLS = 20  # calls captured per graph (whole cycles of the sets): launch gaps amortised, replay short
MODES = ("graph", "eager")


def sets_for(bytes_per_set: int, cache_bytes: int = L2_BYTES_GUESS, cap: int = 16) -> int:
    """How many input sets to rotate through so one cycle moves at least twice the cache."""
    if bytes_per_set <= 0:
        raise ValueError("bytes_per_set must be positive")
    return max(2, min(cap, -(-2 * cache_bytes // bytes_per_set)))


def graph_calls(n_sets: int, min_calls: int = GRAPH_MIN_CALLS) -> int:
    """Calls in one captured graph: whole cycles of the n_sets input sets, at least min_calls."""
    if n_sets < 1:
        raise ValueError(f"n_sets must be at least 1, got {n_sets}")
    return n_sets * max(1, -(-min_calls // n_sets))


@dataclass(frozen=True)
class ArmTimer:
    """Samples of one arm: `sample(rep)` returns seconds per call."""

    mode: str  # "graph" or "eager": what the samples really measured
    calls: int  # calls per sample
    note: str | None  # why graph timing was not used, where it was asked for
    sample: Callable[[int], float]

    def as_record(self) -> dict[str, Any]:
        return {"mode": self.mode, "calls_per_sample": self.calls, "note": self.note}


def describe(record: dict[str, Any]) -> str:
    """One table cell for an `ArmTimer.as_record()`: `graph, 20 calls/sample` or `eager, ... (why)`."""
    text = f"{record['mode']}, {record['calls_per_sample']} calls/sample"
    return f"{text} ({record['note']})" if record.get("note") else text


Replay = Callable[[], None]
Capture = Callable[[Callable[..., Any], Sequence[Sequence[Any]], torch.device, int], Replay]


def arm_timer(
    fn: Callable[..., Any],
    sets: Sequence[Sequence[Any]],
    device: torch.device,
    mode: str = "graph",
    inner: int = 1,
    capture: Capture | None = None,
) -> ArmTimer:
    """A timer for fn over the rotating input sets; graph mode falls back to eager where capture fails.

    `capture` (default `capture_graph`, CUDA only) is the seam the CPU tests use."""
    if mode not in MODES:
        raise ValueError(f"timing mode {mode!r}: expected one of {', '.join(MODES)}")
    if not sets:
        raise ValueError("sets: need at least one input set")
    note = None
    if mode == "graph":
        if device.type == "cuda" or capture is not None:
            calls = graph_calls(len(sets))
            try:
                replay = (capture or capture_graph)(fn, sets, device, calls)
            except Exception as exc:  # an op that cannot be captured is timed eagerly, and the record says so
                note = f"capture refused: {first_line(exc)}"
                _recover(device)
            else:
                return ArmTimer("graph", calls, None, lambda rep: time_replay(replay, device) / calls)
        else:
            note = f"no CUDA graphs on {device.type}"
    return ArmTimer("eager", inner, note, lambda rep: time_once(fn, sets[rep % len(sets)], device, inner))


def capture_graph(fn: Callable[..., Any], sets: Sequence[Sequence[Any]], device: torch.device, calls: int) -> Replay:
    """One CUDA graph of `calls` calls of fn, input set i % len(sets) for call i; returns its replay."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):  # warm-up off the default stream, as capture wants: lazy init, autotuning
        for args in sets:
            fn(*args)
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    first: list[Exception] = []  # the op's own error: ending a broken capture raises a vaguer one over it
    try:
        with torch.cuda.graph(graph):
            try:
                for i in range(calls):
                    fn(*sets[i % len(sets)])
            except Exception as exc:
                first.append(exc)
                raise
    except Exception as exc:
        raise (first[0] if first else exc) from None
    return graph.replay


def time_replay(replay: Replay, device: torch.device) -> float:
    """Seconds for one replay (all its calls)."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    replay()
    return time.perf_counter() - t0


def time_once(fn: Callable[..., Any], args: Sequence[Any], device: torch.device, inner: int = 1) -> float:
    """Seconds per call of fn(*args), averaged over `inner` back-to-back eager calls."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn(*args)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / inner
    t0 = time.perf_counter()
    for _ in range(inner):
        fn(*args)
    return (time.perf_counter() - t0) / inner


def first_line(exc: BaseException, limit: int = 160) -> str:
    """`Type: first line of the message`, cut to `limit` characters (for tables and records)."""
    lines = str(exc).splitlines()
    return f"{type(exc).__name__}: {lines[0][:limit] if lines else ''}".rstrip(": ")


def _recover(device: torch.device) -> None:
    """After a refused capture: drain the device so the eager fallback starts clean (errors here are not ours)."""
    if device.type == "cuda":
        try:
            torch.cuda.synchronize(device)
        except Exception:  # noqa: BLE001 - the eager run reports any real fault
            pass


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def clocks() -> dict[str, str]:
    """SM and memory clocks as nvidia-smi reports them (read before and after a run; never changed)."""
    if not shutil.which("nvidia-smi"):
        return {"note": "nvidia-smi not found"}
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=20,
    )
    return {"nvidia-smi": out.stdout.strip() or out.stderr.strip()}


def gpu_device(requested: str | None, command: str, on_cpu: str) -> str | None:
    """The device a GPU benchmark runs on. Without a CUDA device it refuses at once, in one line on stderr
    (None: the caller exits 2), unless `--device cpu` asked for the CPU; then its first line says so and
    what a CPU run measures (`on_cpu`), before any model is loaded."""
    has_gpu = torch.cuda.is_available()
    if requested != "cpu" and not has_gpu:
        print(
            f"error: {command} measures a CUDA device and there is none here; --device cpu runs it on the CPU, "
            f"where it measures {on_cpu}",
            file=sys.stderr,
        )
        return None
    if requested == "cpu":
        print(f"{command}: on the CPU (--device cpu): this measures {on_cpu}", flush=True)
        return "cpu"
    return "cuda"
