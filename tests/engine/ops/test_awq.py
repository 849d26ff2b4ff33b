"""Tests for engine.ops.quant (awq): hand-packed words, a random round trip, and dequant-then-linear."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from engine import kernels
from engine.flags import REFERENCE

# the table with every kernel off: its entry checks, then the pure-torch reference
awq_linear = partial(kernels.awq_linear, REFERENCE)
dequant_awq = partial(kernels.dequant_awq, REFERENCE)


def to_int32(word: int) -> int:
    return word - (1 << 32) if word >= 1 << 31 else word


def test_hand_packed_words():
    # row 0: columns 0..7 = 1..8, written in nibbles 0..7 as columns 0,2,4,6,1,3,5,7 -> 0x86427531
    # row 1: columns = 15,0,9,10,11,12,13,14 -> nibbles F,9,B,D,0,A,C,E -> 0xECA0DB9F
    qweight = torch.tensor([[to_int32(0x86427531)], [to_int32(0xECA0DB9F)]], dtype=torch.int32)
    qzeros = torch.tensor([[0x75316420]], dtype=torch.int32)  # zeros of columns 0..7 = 0..7
    scales = torch.tensor([[0.5, 0.25, 1.0, 2.0, 0.125, 4.0, 1.5, 3.0]], dtype=torch.float16)
    w = dequant_awq(qweight, qzeros, scales, group_size=2)
    assert w.dtype == torch.float16 and w.shape == (2, 8)
    assert w.tolist() == [
        [0.5, 0.25, 1.0, 2.0, 0.125, 4.0, 1.5, 3.0],  # q - z = 1 everywhere
        [7.5, -0.25, 7.0, 14.0, 0.875, 28.0, 10.5, 21.0],  # q - z = 15, -1, 7, 7, 7, 7, 7, 7
    ]


def pack_awq(values: list[list[int]]) -> torch.Tensor:
    """Python-int packer: column 8w + j goes to nibble (0, 4, 1, 5, 2, 6, 3, 7)[j] of word w."""
    nibble_of = [0, 4, 1, 5, 2, 6, 3, 7]
    rows = []
    for row in values:
        words = []
        for w in range(len(row) // 8):
            word = 0
            for j in range(8):
                word |= row[8 * w + j] << (4 * nibble_of[j])
            words.append(to_int32(word))
        rows.append(words)
    return torch.tensor(rows, dtype=torch.int32)


def random_awq(gen, k=56, n=24, group=8, scale_dtype=torch.float16):
    q = torch.randint(0, 16, (k, n), generator=gen)
    z = torch.randint(0, 16, (k // group, n), generator=gen)
    s = (torch.rand(k // group, n, generator=gen) * 0.05 + 0.001).to(scale_dtype)
    exact = (q - z.repeat_interleave(group, 0)).double() * s.double().repeat_interleave(group, 0)
    return pack_awq(q.tolist()), pack_awq(z.tolist()), s, exact


@pytest.mark.parametrize("scale_dtype", [torch.float16, torch.bfloat16])
def test_random_round_trip(scale_dtype, gen):
    qweight, qzeros, scales, exact = random_awq(gen, scale_dtype=scale_dtype)
    w = dequant_awq(qweight, qzeros, scales, 8)
    assert w.dtype == scale_dtype
    assert torch.equal(w, exact.to(scale_dtype))  # the one rounding of the exact value
    assert torch.equal(dequant_awq(qweight, qzeros, scales, 8, dtype=torch.float32), exact.float())


def test_awq_linear_is_dequant_then_linear(dtype, gen, close):
    qweight, qzeros, scales, exact = random_awq(gen)
    x = torch.randn(3, 56, generator=gen).to(dtype)
    out = awq_linear(x, qweight, qzeros, scales, 8)
    assert out.dtype == dtype and out.shape == (3, 24)
    close(out, x.double() @ exact.to(dtype).double(), dtype, "reduction")


def test_awq_errors_name_the_tensor(gen):
    qweight, qzeros, scales, _ = random_awq(gen)
    with pytest.raises(ValueError, match="group_size: 5 does not divide K=56"):
        dequant_awq(qweight, qzeros, scales, 5)
    with pytest.raises(ValueError, match="scales: dim 1 is 23 but N"):
        dequant_awq(qweight, qzeros, scales[:, :23], 8)
    with pytest.raises(TypeError, match="qweight: dtype int64"):
        dequant_awq(qweight.long(), qzeros, scales, 8)


def test_repeat_each_matches_repeat_interleave(gen):
    from engine.ops._packing import repeat_each

    t = torch.randn(5, 7, generator=gen)
    assert torch.equal(repeat_each(t, 3, 0), t.repeat_interleave(3, dim=0))
    assert torch.equal(repeat_each(t, 16, 1), t.repeat_interleave(16, dim=1))
