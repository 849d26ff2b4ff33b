"""Stand-ins for CUDA tensors in the kernel table's arm choice, on an H200 as the table's device probe sees it:
the table's tests choose arms on the CPU without a GPU."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from engine import kernels

H200 = kernels.Device(0, (9, 0), 227 * 1024, 132)  # an H200's capability, opt-in ceiling and SMs


@contextmanager
def on_an_h200() -> Iterator[None]:
    """Counters reset around a test, the stand-ins on an H200 (each test module's autouse fixture enters it)."""
    kernels.reset_counts()
    with kernels.on_device(H200):
        yield
    kernels.reset_counts()


class OnGpu:
    """A stand-in for a CUDA tensor in the arm choice: only is_cuda, shape, dtype and device are read."""

    def __init__(self, *shape: int, dtype: torch.dtype = torch.bfloat16) -> None:
        self.is_cuda, self.shape, self.dtype, self.device = True, shape, dtype, torch.device("cuda", 0)

    def is_contiguous(self) -> bool:
        return True


def decode_args(q: OnGpu, k_cache: OnGpu) -> tuple[object, ...]:
    """paged_decode_attention's arguments around these stand-ins: V is K's twin, the tables and lengths int32."""
    tables, lens = OnGpu(q.shape[0], 3, dtype=torch.int32), OnGpu(q.shape[0], dtype=torch.int32)
    return (q, k_cache, k_cache, tables, lens, 1.0)
