"""One check for the GEMV arms' GPU tests (test_gemv_prologue.py, test_gemv_stream.py): a chain of an arm's launches
equals the default kernels it replaces bit for bit, eager and replayed from a captured CUDA graph."""

from __future__ import annotations

from collections.abc import Callable

import torch


def rand(g: torch.Generator, device: torch.device, *shape: int, scale: float = 1.0) -> torch.Tensor:
    """bf16 normal values on `device`, drawn on the CPU from `g` (the same values on any machine)."""
    return (torch.randn(*shape, generator=g) * scale).to(torch.bfloat16).to(device)


def assert_chain_equals_defaults(chain: Callable[[], torch.Tensor], defaults: Callable[[], torch.Tensor]) -> None:
    """`chain()` bitwise equal to `defaults()` eagerly, then captured (after a warm-up on the capture stream) and
    replayed three times."""
    want = defaults()
    assert torch.equal(chain(), want)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        chain()  # warm-up on the capture stream
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = chain()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, want)
