"""A mode that records the calls reading a tensor's values on the host: a synchronisation that a CUDA graph
capture refuses, so a step with one stays eager on the GPU (engine/runner.py `_capture_fn`).

Two layers, since on the CPU a read needs no op: Python's conversions of a tensor (`.tolist()`, `.item()`,
`int(t)`, `if t:`) seen as torch functions, and the aten ops whose result's shape depends on the values
(`nonzero`, `unique`, one-argument `where`) or that return a Python scalar."""

from __future__ import annotations

from types import TracebackType

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

CONVERSIONS = {"tolist", "item", "__bool__", "__int__", "__float__", "__index__", "numpy"}
OPS = {
    torch.ops.aten._local_scalar_dense.default,
    torch.ops.aten.nonzero.default,
    torch.ops.aten._unique2.default,
    torch.ops.aten.unique_dim.default,
    torch.ops.aten.unique_consecutive.default,
    torch.ops.aten.equal.default,
}


class HostReads:
    """`with HostReads() as reads:` records every host read run under it, while `reads.watching` is true."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.watching = True
        self._modes = (_Conversions(self), _Ops(self))

    def __enter__(self) -> HostReads:
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(kind, exc, tb)


class _Conversions(TorchFunctionMode):
    def __init__(self, reads: HostReads) -> None:
        super().__init__()
        self.reads = reads

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if self.reads.watching and getattr(func, "__name__", "") in CONVERSIONS:
            self.reads.seen.append(f"Tensor.{func.__name__}")
        return func(*args, **(kwargs or {}))


class _Ops(TorchDispatchMode):
    def __init__(self, reads: HostReads) -> None:
        super().__init__()
        self.reads = reads

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        # torch.where(cond) with one argument is nonzero under another name
        if self.reads.watching and (func in OPS or (func.overloadpacket is torch.ops.aten.where and len(args) == 1)):
            self.reads.seen.append(str(func))
        return func(*args, **(kwargs or {}))
