"""Tests for engine.ops.quant (nvfp4): hand-packed bytes and scales, a random round trip, dequant-then-linear."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from engine import kernels
from engine.flags import REFERENCE

# the table with every kernel off: its entry checks, then the pure-torch reference
dequant_nvfp4 = partial(kernels.dequant_nvfp4, REFERENCE)
nvfp4_linear = partial(kernels.nvfp4_linear, REFERENCE)


# element codes 0..15 of a row (sign bit 3, magnitude 0, .5, 1, 1.5, 2, 3, 4, 6) and their values
CODES = [0x1, 0x9, 0x7, 0xF, 0x2, 0x3, 0x4, 0x5, 0x6, 0xE, 0x0, 0x8, 0xA, 0xB, 0xC, 0xD]
VALUES = [0.5, -0.5, 6.0, -6.0, 1.0, 1.5, 2.0, 3.0, 4.0, -4.0, 0.0, -0.0, -1.0, -1.5, -2.0, -3.0]
BYTES = [0x91, 0xF7, 0x32, 0x54, 0xE6, 0x80, 0xBA, 0xDC]  # element 2i in the low nibble
# e4m3 bytes (sign, 4 exponent bits with bias 7, 3 mantissa bits) and their values
SCALE_BYTES = {0x3C: 1.5, 0x01: 2.0**-9, 0x7E: 448.0, 0x08: 2.0**-6}


def test_hand_packed_bytes_and_scales():
    assert BYTES == [CODES[2 * i] | CODES[2 * i + 1] << 4 for i in range(8)]
    rows = list(SCALE_BYTES)
    packed = torch.tensor([BYTES] * len(rows), dtype=torch.uint8)
    scales = torch.tensor([[b] for b in rows], dtype=torch.uint8).view(torch.float8_e4m3fn)
    w = dequant_nvfp4(packed, scales, torch.tensor([0.25]), torch.float32)
    assert w.shape == (4, 16) and w.dtype == torch.float32
    for r, b in enumerate(rows):
        assert w[r].tolist() == [v * SCALE_BYTES[b] * 0.25 for v in VALUES], hex(b)
    assert torch.signbit(w[0, 11])  # -0 stays negative zero


def random_nvfp4(gen, n=7, k=48):
    """Random codes packed by python ints, random e4m3 scales, and the exact float64 weight."""
    codes = torch.randint(0, 16, (n, k), generator=gen).tolist()
    pairs = [[row[2 * i] | row[2 * i + 1] << 4 for i in range(k // 2)] for row in codes]  # low nibble first
    packed = torch.tensor(pairs, dtype=torch.uint8)
    scales = (torch.rand(n, k // 16, generator=gen) * 30 + 0.01).to(torch.float8_e4m3fn)
    magnitude = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    values = [[(-1.0 if c & 8 else 1.0) * magnitude[c & 7] for c in row] for row in codes]
    s = scales.double().repeat_interleave(16, dim=1)
    return packed, scales, torch.tensor(values, dtype=torch.float64) * s


def test_random_round_trip(dtype, gen):
    packed, scales, exact = random_nvfp4(gen)
    gs = 0.0123
    w = dequant_nvfp4(packed, scales, gs, dtype)
    assert w.dtype == dtype and w.shape == (7, 48)
    # e2m1 * e4m3 is exact; one fp32 rounding with the global scale, then one to the dtype
    expected = (exact.float() * torch.tensor(gs, dtype=torch.float32)).to(dtype)
    assert torch.equal(w, expected)
    torch.testing.assert_close(w.double(), exact * gs, rtol=2**-7 if dtype == torch.bfloat16 else 2**-23, atol=0)


def test_nvfp4_linear_is_dequant_then_linear(dtype, gen, close):
    packed, scales, exact = random_nvfp4(gen)
    x = torch.randn(5, 48, generator=gen).to(dtype)
    out = nvfp4_linear(x, packed, scales, torch.tensor(0.01))
    assert out.dtype == dtype and out.shape == (5, 7)
    close(out, x.double() @ (exact * 0.01).float().to(dtype).double().T, dtype, "reduction")


def test_nvfp4_errors_name_the_tensor(gen):
    packed, scales, _ = random_nvfp4(gen)
    with pytest.raises(ValueError, match="block_scales: dim 1 is 2 but K/16 is 3"):
        dequant_nvfp4(packed, scales[:, :2], 1.0, torch.float32)
    with pytest.raises(TypeError, match="block_scales: dtype float32"):
        dequant_nvfp4(packed, scales.float(), 1.0, torch.float32)
    with pytest.raises(ValueError, match="global_scale: expected one value"):
        dequant_nvfp4(packed, scales, torch.ones(2), torch.float32)
    with pytest.raises(ValueError, match="packed: K=40 is not a multiple of 16"):
        dequant_nvfp4(packed[:, :20], scales, 1.0, torch.float32)
