"""Tests for engine.ops.gemv: dtype-faithful linear and embedding."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from engine import kernels
from engine.flags import REFERENCE

# the table with every kernel off: its entry checks, then the pure-torch reference
embedding = partial(kernels.embedding, REFERENCE)
linear = partial(kernels.linear, REFERENCE)


def reference_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    # float64 python-level dot products, one output column at a time
    out = torch.stack([(x.double() * w[n].double()).sum(-1) for n in range(w.shape[0])], dim=-1)
    return out if b is None else out + b.double()


@pytest.mark.parametrize("shape", [(1, 83), (7, 19), (3, 5, 111)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_matches_float64(shape, with_bias, dtype, gen, close):
    x = torch.randn(shape, generator=gen).to(dtype)
    w = (torch.randn(19, shape[-1], generator=gen) / shape[-1] ** 0.5).to(dtype)
    b = torch.randn(19, generator=gen).to(dtype) if with_bias else None
    out = linear(x, w, b)
    assert out.dtype == dtype and out.shape == (*shape[:-1], 19)
    close(out, reference_linear(x, w, b), dtype, "reduction")


def test_linear_rounds_once_to_the_input_dtype(gen):
    x = torch.randn(7, 83, generator=gen).bfloat16()
    w = torch.randn(19, 83, generator=gen).bfloat16()
    # one rounding of the fp32-accumulated product: equals the fp32 GEMM rounded to bf16 up to accumulation order
    expected = (x.float() @ w.float().T).bfloat16()
    mismatch = (linear(x, w) != expected).float().mean().item()
    assert mismatch < 0.05


def test_linear_rejects_mixed_dtypes_and_shapes(gen):
    x = torch.randn(7, 19, generator=gen)
    with pytest.raises(TypeError, match="weight: dtype bfloat16 differs from x's float32"):
        linear(x, torch.randn(5, 19).bfloat16())
    with pytest.raises(ValueError, match="weight: dim 1 is 18 but x's last dim"):
        linear(x, torch.randn(5, 18))
    with pytest.raises(ValueError, match="bias: dim 0 is 4"):
        linear(x, torch.randn(5, 19), torch.randn(4))


def test_embedding_is_a_row_lookup(dtype, gen):
    w = torch.randn(83, 19, generator=gen).to(dtype)
    ids = torch.randint(0, 83, (3, 7), generator=gen)
    out = embedding(ids, w)
    assert out.dtype == dtype and out.shape == (3, 7, 19)
    for i in range(3):
        for j in range(7):
            assert torch.equal(out[i, j], w[int(ids[i, j])])
    assert torch.equal(embedding(ids.int(), w), out)


def test_embedding_rejects_out_of_range_ids(gen):
    w = torch.randn(7, 3, generator=gen)
    with pytest.raises(IndexError, match=r"ids: values span \[0, 7\]"):
        embedding(torch.tensor([0, 7]), w)
    with pytest.raises(TypeError, match="ids: dtype float32"):
        embedding(torch.tensor([0.0]), w)


def test_linear_accepts_strided_inputs(dtype, gen, close):
    x = torch.randn(83, 7, generator=gen).to(dtype).T  # [7, 83], column-major
    w = torch.randn(19, 2 * 83, generator=gen).to(dtype)[:, ::2]  # every other column
    close(linear(x, w), reference_linear(x, w, None), dtype, "reduction")


class _GpuRows:
    """Stands in for a CUDA x in the routing rule: only is_cuda, numel, shape and device are read (the device: W's,
    so the predicate's one-device rule holds; the table checks the arms' needs against `on_device`'s device)."""

    def __init__(self, rows: int, k: int) -> None:
        self.is_cuda, self.shape, self._n = True, (rows, k), rows * k
        self.device = torch.device("cpu")

    def numel(self) -> int:
        return self._n


def test_decode_rows_of_a_row_major_weight_take_the_gemv() -> None:
    from engine.cuda import gemv
    from engine.flags import FlagSnapshot

    def arm(x: object, w: torch.Tensor, snapshot: FlagSnapshot | None = None) -> str:
        with kernels.on_device(kernels.Device(0, (9, 0), 227 * 1024, 132)):  # an H200's
            return kernels.linear.choose(snapshot or plain, x, w)  # type: ignore[arg-type]

    # the streamed and PDL arms stand before the GEMV and measure a real sm_90 device; a fake tensor skips them
    plain = FlagSnapshot.defaults().with_(VT_GEMV_STREAM=False, VT_GEMV_PDL=False)
    w = torch.randn(48, 32)
    assert arm(_GpuRows(1, 32), w) == "gemv"  # VT_GEMV is ON by default
    assert arm(_GpuRows(kernels.gemv.GEMV_TAKES_ROWS, 32), w) == "gemv"
    # past its A/B's range the table leaves the kernel's rows to the GEMM; named, the GEMV still takes them
    assert arm(_GpuRows(kernels.gemv.GEMV_TAKES_ROWS + 1, 32), w) == "reference"
    assert arm(_GpuRows(gemv.MAX_ROWS, 32), w, plain.with_arm("linear", "gemv")) == "gemv"
    assert arm(_GpuRows(gemv.MAX_ROWS + 1, 32), w) == "reference"  # a prefill keeps the GEMM
    assert arm(_GpuRows(1, 48), w.T) == "reference"  # a transposed weight too: the GEMM reads it in place
    assert arm(torch.randn(1, 32), w) == "reference"  # a CPU tensor runs the reference
    assert arm(_GpuRows(1, 32), w, plain.with_(VT_GEMV=False)) == "reference"
    assert arm(_GpuRows(1, 32), w, REFERENCE) == "reference"  # VT_KERNELS=0: every op its reference


def test_a_call_past_the_gemvs_range_is_counted_with_the_range_as_its_reason() -> None:
    from engine.flags import FlagSnapshot

    plain = FlagSnapshot.defaults().with_(VT_GEMV_STREAM=False, VT_GEMV_PDL=False)
    w = torch.randn(48, 32)
    kernels.reset_counts()
    with kernels.on_device(kernels.Device(0, (9, 0), 227 * 1024, 132)):
        for rows in (kernels.gemv.GEMV_TAKES_ROWS + 1, 9):  # past the range, then past the kernel's rows
            kernels.linear._select(plain, (_GpuRows(rows, 32), w), {}, count=True)
    assert kernels.counts().fallbacks == {
        ("linear", "gemv", "1-2 rows unasked (its A/B's range)"): 1,
        ("linear", "gemv", "at most 8 rows and a row-major weight, on x's device"): 1,
    }
