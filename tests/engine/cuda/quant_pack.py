"""Random AWQ, GPTQ and NVFP4 checkpoints for the quant kernel tests, with their unpacked integer values."""

from __future__ import annotations

from dataclasses import dataclass

import torch

AWQ_COLUMN_NIBBLE = (0, 4, 1, 5, 2, 6, 3, 7)  # column j of a word sits in nibble AWQ_COLUMN_NIBBLE[j]
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def pack_nibbles(values: torch.Tensor, nibble_of: tuple[int, ...]) -> torch.Tensor:
    """values: [..., 8m] ints in [0, 16) -> [..., m] int32, value j of each 8 in nibble nibble_of[j]."""
    v = values.to(torch.int64).reshape(*values.shape[:-1], -1, 8)
    word = torch.zeros(v.shape[:-1], dtype=torch.int64)
    for j, nib in enumerate(nibble_of):
        word |= v[..., j] << (4 * nib)
    return torch.where(word >= 2**31, word - 2**32, word).to(torch.int32)


@dataclass
class Int4:
    q: torch.Tensor  # [K, N] ints in [0, 16)
    zeros: torch.Tensor  # [groups, N] the zero points as used (after any v1 offset)
    scales: torch.Tensor  # [groups, N]
    groups_of_rows: torch.Tensor  # [K] the group of each row
    qweight: torch.Tensor
    qzeros: torch.Tensor

    def dequant(self, dtype: torch.dtype) -> torch.Tensor:
        """The exact value (q - z) * s, rounded once to dtype."""
        g = self.groups_of_rows.long()
        return ((self.q - self.zeros[g]).double() * self.scales[g].double()).to(dtype)


def awq(k: int, n: int, group: int, scale_dtype: torch.dtype, gen: torch.Generator) -> Int4:
    q = torch.randint(0, 16, (k, n), generator=gen)
    z = torch.randint(0, 16, (k // group, n), generator=gen)
    s = (torch.rand(k // group, n, generator=gen) * 0.02 + 0.001).to(scale_dtype)
    return Int4(
        q, z, s, torch.arange(k) // group, pack_nibbles(q, AWQ_COLUMN_NIBBLE), pack_nibbles(z, AWQ_COLUMN_NIBBLE)
    )


def gptq(k: int, n: int, groups: int, zero_offset: int, scale_dtype: torch.dtype, gen: torch.Generator) -> Int4:
    """An act-order checkpoint: rows are assigned to groups in a shuffled order."""
    q = torch.randint(0, 16, (k, n), generator=gen)
    stored = torch.randint(0, 16 - zero_offset, (groups, n), generator=gen)  # v1 stores zero - 1
    s = (torch.rand(groups, n, generator=gen) * 0.02 + 0.001).to(scale_dtype)
    g_idx = (torch.arange(k) * groups // k)[torch.randperm(k, generator=gen)].to(torch.int32)
    seq = tuple(range(8))
    qweight = pack_nibbles(q.T.contiguous(), seq).T.contiguous()  # packed along K
    return Int4(q, stored + zero_offset, s, g_idx, qweight, pack_nibbles(stored, seq))


@dataclass
class Nvfp4:
    packed: torch.Tensor  # [N, K/2] uint8
    scales: torch.Tensor  # [N, K/16] float8_e4m3fn
    global_scale: torch.Tensor  # [1] fp32

    def dequant(self, dtype: torch.dtype) -> torch.Tensor:
        """e2m1 * fp8 scale * global scale, the first product exact, then one fp32 product, then dtype."""
        codes = torch.stack([self.packed & 0xF, self.packed >> 4], dim=-1).flatten(1).long()
        table = torch.tensor(E2M1 + tuple(-x for x in E2M1), dtype=torch.float32)
        vals = table[codes] * self.scales.float().repeat_interleave(16, dim=1)
        return (vals * self.global_scale.float()).to(dtype)


def nvfp4(n: int, k: int, gen: torch.Generator) -> Nvfp4:
    packed = torch.randint(0, 256, (n, k // 2), generator=gen).to(torch.uint8)
    scales = (torch.rand(n, k // 16, generator=gen) * 400 + 0.01).to(torch.float8_e4m3fn)
    return Nvfp4(packed, scales, torch.rand(1, generator=gen) * 1e-3 + 1e-4)
