"""Kernel numerics cases: each family's module here exposes `CASES: list[KernelCase]`; `discover()` gathers them."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

Inputs = dict[str, Any]


@dataclass(frozen=True)
class KernelCase:
    name: str  # unique, "/"-separated: family/arm/dtype/shape
    arm: str  # the kernel arm ("generic", "tiled", "splitkv_swap", "warp_d128", ...)
    flag: str | None  # the VT_* flag that selects the arm (None: on under VT_KERNELS alone, or a by-name arm)
    dtype: torch.dtype
    make: Callable[[int, torch.device], Inputs]  # (seed, device) -> inputs
    kernel: Callable[[Inputs], torch.Tensor]
    reference: Callable[[Inputs], torch.Tensor]  # a pure-torch reference of engine/ops (never a kernel arm)
    tolerance: str  # a key of lab.gates.numerics.TOLERANCES
    row: str  # the roadmap row the case is evidence for
    tags: tuple[str, ...] = ()  # "long" for the slow long-context cases, "small" for sanitizer runs

    def reference_output(self, inputs: Inputs) -> torch.Tensor:
        """The reference's output: engine/ops is pure torch (it never dispatches to a kernel), so a kernel is
        never judged against itself."""
        return self.reference(inputs)


def discover() -> list[KernelCase]:
    """Every case of every module in this package, in module order; names must be unique."""
    cases: list[KernelCase] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        cases.extend(getattr(module, "CASES", []))
    names = [c.name for c in cases]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"duplicate kernel case names: {sorted(dup)}")
    return cases
