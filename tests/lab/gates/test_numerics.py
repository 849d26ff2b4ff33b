"""The numerics comparator on the CPU: bitwise %, max_abs, max_rel, tolerance edges, NaN, and a self-test that can fail."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lab.gates import numerics
from lab.gates.numerics import TOLERANCES, Tolerance, compare


def rand(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 3) -> torch.Tensor:
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) + 0.25).to(dtype)


def test_self_test_passes() -> None:
    assert numerics.self_test() == []


def test_self_test_catches_a_comparator_that_ignores_the_last_column(monkeypatch: pytest.MonkeyPatch) -> None:
    real = numerics.compare
    monkeypatch.setattr(numerics, "compare", lambda out, ref, tol: real(out[..., :-1], ref[..., :-1], tol))
    last = [p for p in numerics.self_test() if "1-ULP change at the last element of row 4" in p]
    assert len(last) == 3  # fp32, bf16, fp16: the last-element change went unseen
    assert all("rows_changed=()" in p for p in last)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_one_corrupted_row(dtype: torch.dtype) -> None:
    ref = rand(19, 83, dtype=dtype)
    out = ref.clone()
    out[11, 7] += 0.5
    got = compare(out, ref, TOLERANCES["exact"])
    assert got.rows_changed == (11,) and not got.passed
    assert got.bitwise_equal_pct == pytest.approx(100.0 * (19 * 83 - 1) / (19 * 83))
    assert got.max_abs == pytest.approx((out[11, 7].float() - ref[11, 7].float()).abs().item())
    assert got.max_rel == pytest.approx(got.max_abs / ref[11, 7].float().abs().item(), rel=1e-6)


def test_tolerance_edges() -> None:
    ref = torch.tensor([[1.0, -2.0, 0.0]])
    tol = Tolerance(atol=0.5, rtol=0.25)  # limits 0.75, 1.0, 0.5
    assert compare(ref + torch.tensor([[0.75, -1.0, 0.5]]), ref, tol).passed
    assert not compare(ref + torch.tensor([[0.0, 0.0, 0.5001]]), ref, tol).passed


def test_nan_only_where_the_reference_has_nan() -> None:
    ref = rand(3, 7)
    out = ref.clone()
    out[2, 1] = float("nan")
    got = compare(out, ref, TOLERANCES["bf16"])
    assert not got.passed and got.max_abs == float("inf") and got.rows_changed == (2,)
    ref2 = ref.clone()
    ref2[2, 1] = float("nan")
    assert compare(out, ref2, TOLERANCES["exact"]).passed


def test_equal_infinities_pass_and_differ_by_zero() -> None:
    ref = rand(2, 5)
    ref[1, 4] = float("inf")
    got = compare(ref.clone(), ref, TOLERANCES["exact"])
    assert got.passed and got.max_abs == 0.0 and got.bitwise_equal_pct == 100.0


def test_mismatched_inputs_are_errors() -> None:
    with pytest.raises(ValueError, match=r"out: shape \(3, 7\) != reference \(7, 3\)"):
        compare(rand(3, 7), rand(7, 3), TOLERANCES["exact"])
    with pytest.raises(TypeError, match="out: dtype torch.bfloat16 != reference torch.float32"):
        compare(rand(3, 7, dtype=torch.bfloat16), rand(3, 7), TOLERANCES["exact"])
    with pytest.raises(TypeError, match="not a float dtype"):
        compare(torch.ones(3, dtype=torch.int32), torch.ones(3, dtype=torch.int32), TOLERANCES["exact"])


def test_references_are_the_pure_ops_whatever_the_environment() -> None:
    import engine.ops
    from lab.gates.cases import KernelCase

    seen = []
    case = KernelCase(
        "x",
        "generic",
        None,
        torch.float32,
        lambda s, d: {},
        lambda i: torch.zeros(1),
        lambda i: seen.append(i) or torch.zeros(1),
        "exact",
        "BACKEND-CUDA",
    )
    case.reference_output({"a": 1})
    assert seen == [{"a": 1}]  # called as given: engine/ops never dispatches to a kernel
    sources = [p.read_text() for p in Path(engine.ops.__file__).parent.glob("*.py")]
    assert not [s for s in sources if "engine.cuda" in s or "engine import flags" in s]
