"""Shared fixtures for the reference-op tests: dtypes, seeded generators and the per-dtype tolerances."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

# (atol, rtol) of a reference op against an independent float64 formulation, per
# dtype and per kind of op. "elementwise": a few roundings per output element;
# "reduction": a dot product or softmax over many inputs, rounded to the dtype at
# several points. bf16 has an 8-bit mantissa (one ulp is 2**-7 relative).
TOLERANCES: dict[str, dict[torch.dtype, tuple[float, float]]] = {
    "elementwise": {torch.float32: (1e-6, 1e-5), torch.bfloat16: (1e-2, 2e-2)},
    "reduction": {torch.float32: (2e-5, 1e-4), torch.bfloat16: (3e-2, 4e-2)},
}

DTYPES = [torch.float32, torch.bfloat16]


@pytest.fixture(params=DTYPES, ids=["fp32", "bf16"])
def dtype(request: pytest.FixtureRequest) -> torch.dtype:
    return request.param


@pytest.fixture
def gen(request: pytest.FixtureRequest) -> torch.Generator:
    """A generator seeded from the test's name, so every test draws its own fixed inputs."""
    seed = sum(ord(c) * (i + 1) for i, c in enumerate(request.node.name)) % (2**31)
    return torch.Generator().manual_seed(seed)


@pytest.fixture
def close() -> Callable[..., None]:
    """`close(actual, expected, dtype, kind)`: assert within TOLERANCES[kind][dtype], in float64."""

    def check(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, kind: str = "elementwise") -> None:
        atol, rtol = TOLERANCES[kind][dtype]
        assert actual.shape == expected.shape, f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
        torch.testing.assert_close(actual.double(), expected.double(), atol=atol, rtol=rtol)

    return check
