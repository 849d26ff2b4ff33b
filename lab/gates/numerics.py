"""Kernel-vs-reference comparator: bitwise-equal %, max_abs, max_rel, the tolerance verdict, and its self-test."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class Tolerance:
    """An element passes when |out - ref| <= atol + rtol * |ref| (and NaN only where the reference has NaN)."""

    atol: float
    rtol: float


# One place for every tolerance class. bf16: two units in the last place at 1.0 (2^-7 each), enough for
# a kernel that keeps fp32 where the reference rounds (or the reverse) and sums in another order.
TOLERANCES: dict[str, Tolerance] = {
    "exact": Tolerance(0.0, 0.0),
    "fp32": Tolerance(2e-5, 2e-4),
    "fp16": Tolerance(2e-3, 2e-3),
    "bf16": Tolerance(1.6e-2, 1.6e-2),
}
# A stack of three decode layers compared at its end (the persistent step's cases): each layer may sum in another
# correct order, and those differences compound, so three layers get three layers' tolerance. Calibrated on the CPU
# (tests/lab/gates/test_stack_tolerance.py): a twin summing every linear's K in two halves, or in fp32 at once, needs
# up to 2.3x the one-op tolerance after three layers (20 seeds, b1 and b8) and fails 1x in 10 of 10 seeds at fp16 b8.
STACK_LAYERS = 3
TOLERANCES |= {
    f"{name}-stack{STACK_LAYERS}": Tolerance(STACK_LAYERS * TOLERANCES[name].atol, STACK_LAYERS * TOLERANCES[name].rtol)
    for name in ("fp16", "bf16")
}
_INT_VIEW = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


@dataclass(frozen=True)
class Comparison:
    numel: int
    bitwise_equal_pct: float
    max_abs: float
    max_rel: float  # relative to max(|ref|, the dtype's smallest normal), so zeros in ref stay finite
    rows_changed: tuple[int, ...]  # rows (over the last dim) with any element not bitwise equal
    passed: bool

    def as_dict(self) -> dict:
        d = asdict(self)
        d["rows_changed"] = len(self.rows_changed)
        return d


def compare(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> Comparison:
    """Compare a kernel's output with its reference, element by element; shapes and dtypes must agree."""
    if out.shape != ref.shape:
        raise ValueError(f"out: shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    if out.dtype != ref.dtype:
        raise TypeError(f"out: dtype {out.dtype} != reference {ref.dtype}")
    if out.dtype not in _INT_VIEW:
        raise TypeError(f"out: dtype {out.dtype} is not a float dtype the comparator knows")
    o = out.detach().reshape(-1, out.shape[-1] if out.dim() else 1)
    r = ref.detach().to(out.device).reshape(o.shape)
    same = o.view(_INT_VIEW[o.dtype]) == r.view(_INT_VIEW[o.dtype])
    of, rf = o.float(), r.float()
    both_nan = of.isnan() & rf.isnan()
    diff = torch.where(same | both_nan, torch.zeros_like(of), (of - rf).abs())  # equal infs differ by 0
    diff = torch.where(diff.isnan(), torch.full_like(diff, float("inf")), diff)  # NaN on one side only
    rel = torch.where(diff == 0, torch.zeros_like(diff), diff / rf.abs().clamp_min(torch.finfo(out.dtype).tiny))
    ok = (diff <= tol.atol + tol.rtol * rf.abs()) | same | both_nan
    numel = same.numel()
    rows = torch.nonzero(~same.all(dim=1)).flatten().tolist()
    return Comparison(
        numel=numel,
        bitwise_equal_pct=100.0 * same.sum().item() / numel if numel else 100.0,
        max_abs=diff.max().item() if numel else 0.0,
        max_rel=rel.max().item() if numel else 0.0,
        rows_changed=tuple(rows),
        passed=bool(ok.all().item()) if numel else True,
    )


def bump_ulp(t: torch.Tensor, index: tuple[int, int]) -> torch.Tensor:
    """A copy of 2-D `t` with one element moved by one unit in the last place (away from zero)."""
    out = t.clone()
    bits = out.view(_INT_VIEW[t.dtype])
    bits[index] += 1
    return out


SELF_TEST_SEEDED = 3 * 3  # three dtypes x a 1-ULP change at an interior, the middle and the last element


def self_test(device: torch.device | str = "cpu") -> list[str]:
    """The comparator must see a 1-ULP change at an interior, the middle and the last element of one row,
    and move exactly that row; identical tensors must compare 100% equal. Returns the problems found."""
    problems = []
    gen = torch.Generator().manual_seed(7)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        ref = (torch.randn(7, 83, generator=gen) + 0.5).to(dtype).to(device)
        clean = compare(ref.clone(), ref, TOLERANCES["exact"])
        if clean.bitwise_equal_pct != 100.0 or clean.rows_changed or not clean.passed:
            problems.append(f"{dtype}: identical tensors compare as {clean}")
        row = 4
        for where, col in (("interior", 5), ("middle", 83 // 2), ("last", 82)):
            got = compare(bump_ulp(ref, (row, col)), ref, TOLERANCES["exact"])
            ulp = (bump_ulp(ref, (row, col))[row, col].float() - ref[row, col].float()).abs().item()
            expect_pct = 100.0 * (ref.numel() - 1) / ref.numel()
            if (
                got.rows_changed != (row,)
                or got.passed
                or abs(got.bitwise_equal_pct - expect_pct) > 1e-9
                or got.max_abs != ulp
            ):
                problems.append(f"{dtype}: 1-ULP change at the {where} element of row {row} compares as {got}")
    return problems
