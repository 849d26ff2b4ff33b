"""Tests for engine.ops.quant (gptq): hand-packed words with act order, v1/v2 zeros, round trips, dequant-then-linear."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from engine import kernels
from engine.flags import REFERENCE

# the table with every kernel off: its entry checks, then the pure-torch reference
dequant_gptq = partial(kernels.dequant_gptq, REFERENCE)
gptq_linear = partial(kernels.gptq_linear, REFERENCE)


def to_int32(word: int) -> int:
    return word - (1 << 32) if word >= 1 << 31 else word


# column n of qweight[0]: its word and the 4-bit values of rows 0..7 (nibble j = row j)
COLUMNS = [
    (0x87654321, [1, 2, 3, 4, 5, 6, 7, 8]),
    (0x0FEDCBA9, [9, 10, 11, 12, 13, 14, 15, 0]),
    (0x11111111, [1, 1, 1, 1, 1, 1, 1, 1]),
    (0x2468ACE0, [0, 14, 12, 10, 8, 6, 4, 2]),
    (0x13579BDF, [15, 13, 11, 9, 7, 5, 3, 1]),
    (0xF0F0F0F0, [0, 15, 0, 15, 0, 15, 0, 15]),
    (0x01234567, [7, 6, 5, 4, 3, 2, 1, 0]),
    (0x76543210, [0, 1, 2, 3, 4, 5, 6, 7]),
]
STORED_ZEROS = [[0, 1, 2, 3, 4, 5, 6, 7], [10, 10, 10, 10, 3, 3, 3, 3]]  # group 0: 0x76543210, 1: 0x3333AAAA
SCALES = [[1.0, 2.0, 0.5, 0.25, 1.0, 2.0, 0.5, 0.25], [0.125] * 8]
G_IDX = [1, 0, 1, 1, 0, 0, 1, 0]  # act order


@pytest.mark.parametrize("version,offset", [(1, 1), (2, 0)])
def test_hand_packed_words(version, offset):
    qweight = torch.tensor([[to_int32(word) for word, _ in COLUMNS]], dtype=torch.int32)
    qzeros = torch.tensor([[0x76543210], [0x3333AAAA]], dtype=torch.int32)
    scales = torch.tensor(SCALES, dtype=torch.float16)
    w = dequant_gptq(qweight, qzeros, scales, torch.tensor(G_IDX, dtype=torch.int32), bits=4, version=version)
    assert w.dtype == torch.float16 and w.shape == (8, 8)
    for k in range(8):
        g = G_IDX[k]
        for n, (_, rows) in enumerate(COLUMNS):
            expected = (rows[k] - (STORED_ZEROS[g][n] + offset)) * SCALES[g][n]
            assert float(w[k, n]) == expected, (k, n)


def pack_sequential(values: list[int], bits: int) -> list[int]:
    """Python-int packer: value i of each 32/bits goes to field i (from the least significant bits)."""
    per = 32 // bits
    words = []
    for w in range(len(values) // per):
        word = 0
        for i in range(per):
            word |= values[w * per + i] << (bits * i)
        words.append(to_int32(word))
    return words


def random_gptq(gen, bits, version, k=48, n=16, groups=5, scale_dtype=torch.float16):
    top = 1 << bits
    q = torch.randint(0, top, (k, n), generator=gen)
    zeros = torch.randint(int(version == 1), top, (groups, n), generator=gen)  # v1 cannot store a zero of 0
    stored = zeros - (1 if version == 1 else 0)
    s = (torch.rand(groups, n, generator=gen) * 0.05 + 0.001).to(scale_dtype)
    g_idx = (torch.arange(k) * groups // k)[torch.randperm(k, generator=gen)]
    qweight = torch.tensor([pack_sequential(col, bits) for col in q.T.tolist()], dtype=torch.int32).T.contiguous()
    qzeros = torch.tensor([pack_sequential(row, bits) for row in stored.tolist()], dtype=torch.int32)
    exact = (q - zeros[g_idx]).double() * s.double()[g_idx]
    return qweight, qzeros, s, g_idx, exact


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("version", [1, 2])
def test_random_round_trip(bits, version, gen):
    qweight, qzeros, scales, g_idx, exact = random_gptq(gen, bits, version)
    assert qweight.shape == (48 * bits // 32, 16)
    w = dequant_gptq(qweight, qzeros, scales, g_idx, bits=bits, version=version)
    assert torch.equal(w, exact.to(torch.float16))
    w32 = dequant_gptq(qweight, qzeros, scales, g_idx.int(), bits=bits, version=version, dtype=torch.float32)
    assert torch.equal(w32, exact.float())


def test_gptq_linear_is_dequant_then_linear(dtype, gen, close):
    qweight, qzeros, scales, g_idx, exact = random_gptq(gen, 4, 1, scale_dtype=torch.bfloat16)
    x = torch.randn(7, 48, generator=gen).to(dtype)
    out = gptq_linear(x, qweight, qzeros, scales, g_idx)
    assert out.dtype == dtype and out.shape == (7, 16)
    close(out, x.double() @ exact.to(dtype).double(), dtype, "reduction")


def test_gptq_errors_name_the_tensor(gen):
    qweight, qzeros, scales, g_idx, _ = random_gptq(gen, 4, 2)
    with pytest.raises(ValueError, match="g_idx: dim 0 is 47 but K"):
        dequant_gptq(qweight, qzeros, scales, g_idx[:47])
    with pytest.raises(IndexError, match=r"g_idx: values outside \[0, 5\)"):
        dequant_gptq(qweight, qzeros, scales, g_idx + 1)
    with pytest.raises(ValueError, match="bits: 3 not supported"):
        dequant_gptq(qweight, qzeros, scales, g_idx, bits=3)
    with pytest.raises(ValueError, match="version: 3 is not a GPTQ format version"):
        dequant_gptq(qweight, qzeros, scales, g_idx, version=3)
