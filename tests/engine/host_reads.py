"""A dispatch mode that records the ops reading a tensor's values on the host: a synchronisation that a CUDA
graph capture refuses, so a step with one stays eager on the GPU (engine/runner.py `_capture_fn`)."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

HOST_READS = {
    torch.ops.aten._local_scalar_dense.default,  # .item(), .tolist(), int(t), bool(t)
    torch.ops.aten.nonzero.default,
    torch.ops.aten._unique2.default,
    torch.ops.aten.unique_dim.default,
    torch.ops.aten.unique_consecutive.default,
    torch.ops.aten.equal.default,
}


class HostReads(TorchDispatchMode):
    """Records every op run under it that reads values on the host, while `watching` is true."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []
        self.watching = True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        # torch.where(cond) with one argument is nonzero under another name
        reads = func in HOST_READS or (func.overloadpacket is torch.ops.aten.where and len(args) == 1)
        if reads and self.watching:
            self.seen.append(str(func))
        return func(*args, **(kwargs or {}))
