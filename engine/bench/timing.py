"""Timing one callable over rotating input sets: CUDA events on a GPU, a host clock elsewhere.

Inputs rotate so that repeated runs do not keep hitting the L2 cache: each repetition uses the next
input set, and enough sets are made to exceed the cache (see `sets_for`)."""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

L2_BYTES_GUESS = 64 << 20  # H200: 60 MB of L2; the rotation covers at least twice this


def sets_for(bytes_per_set: int, cache_bytes: int = L2_BYTES_GUESS, cap: int = 16) -> int:
    """How many input sets to rotate through so one cycle moves at least twice the cache."""
    if bytes_per_set <= 0:
        raise ValueError("bytes_per_set must be positive")
    return max(2, min(cap, -(-2 * cache_bytes // bytes_per_set)))


def time_once(fn: Callable[..., Any], args: Sequence[Any], device: torch.device, inner: int = 1) -> float:
    """Seconds per call of fn(*args), averaged over `inner` back-to-back calls."""
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


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def clocks() -> dict[str, str]:
    """SM and memory clocks as nvidia-smi reports them (read before and after a run; never changed)."""
    import shutil
    import subprocess

    if not shutil.which("nvidia-smi"):
        return {"note": "nvidia-smi not found"}
    out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw",
                          "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
    return {"nvidia-smi": out.stdout.strip() or out.stderr.strip()}
