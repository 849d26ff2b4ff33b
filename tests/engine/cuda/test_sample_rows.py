"""The serving sampler's fused draw (VT_SAMPLE_ROWS_KERNEL): compile (nvcc), the table's row (CPU), and on a
GPU every numerics case of lab/gates/cases/sample_rows.py bitwise, the sampler's RANDOM mode through it,
and capture in a CUDA graph."""

from __future__ import annotations

import pytest
import torch

from engine import kernels
from engine.flags import FlagSnapshot
from engine.sampler import Mode, sample
from lab.gates import numerics
from lab.gates.cases import sample_rows as cases

FAMILY = "sample_rows"  # the conftest's `cuda` and `compiled` fixtures read these
KERNELS = "the fused sampling kernels"


def test_source_compiles_and_exports_its_launcher(compiled) -> None:
    for symbol in ("vt_sample_rows_gumbel", "vt_sample_rows_last_error"):
        assert hasattr(compiled, symbol), symbol


def test_the_arm_is_on_by_default_and_takes_unfiltered_rows_only() -> None:
    (arm,) = kernels.sample_rows.arms
    assert arm.flags == ("VT_SAMPLE_ROWS_KERNEL",) and arm.enabled(FlagSnapshot.defaults())  # bit-exact: ON
    assert not arm.enabled(FlagSnapshot.defaults().with_(VT_SAMPLE_ROWS_KERNEL=False))  # the rollback
    x = cases.draw_inputs(0, torch.device("cpu"), dtype=torch.float32, vocab=7)
    args = (x["logits"], x["temperature"], x["top_k"], x["top_p"], x["seeds"], x["steps"])
    assert arm.supports(*args, False) and not arm.supports(*args, True)


@pytest.mark.gpu
@pytest.mark.parametrize("case", cases.CASES, ids=lambda c: c.name)
def test_case_is_bitwise(cuda: torch.device, case) -> None:
    x = case.make(0, cuda)
    got = numerics.compare(case.kernel(x), case.reference_output(x), numerics.TOLERANCES[case.tolerance])
    assert got.passed and got.bitwise_equal_pct == 100.0, f"{case.name}: {got}"


@pytest.mark.gpu
def test_the_sampler_draws_the_reference_tokens_in_a_graph(cuda: torch.device) -> None:
    x = cases.draw_inputs(1, cuda, dtype=torch.bfloat16, vocab=151_936)
    logits = x["logits"].contiguous()
    args = (logits, x["temperature"], x["top_k"], x["top_p"], x["seeds"], x["steps"])
    on = FlagSnapshot.defaults().with_(VT_SAMPLE_ROWS_KERNEL=True)
    want = sample(FlagSnapshot.defaults().with_(VT_SAMPLE_ROWS_KERNEL=False), *args, mode=Mode.RANDOM)
    kernels.reset_counts()
    graph = torch.cuda.CUDAGraph()
    sample(on, *args, mode=Mode.RANDOM)  # warm-up: the module loads outside the capture
    with torch.cuda.graph(graph):
        out = sample(on, *args, mode=Mode.RANDOM)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, want) and kernels.counts().ran[("sample_rows", "gumbel")] >= 1
