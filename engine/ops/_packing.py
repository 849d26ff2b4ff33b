"""Unpacking of sub-byte integers from int32 words, shared by the AWQ and GPTQ references."""

from __future__ import annotations

import torch


def unpack_int32(words: torch.Tensor, bits: int) -> torch.Tensor:  # words: [..., m] int32 -> [..., m * 32/bits] int64
    """Field j of each word (bits [bits*j, bits*(j+1)), j from the least significant end), word by word."""
    per_word = 32 // bits
    shifts = torch.arange(0, 32, bits, device=words.device)
    # int64 so that the sign bit of a negative int32 becomes an ordinary high bit
    fields = (words.to(torch.int64)[..., None] >> shifts) & ((1 << bits) - 1)
    return fields.reshape(*words.shape[:-1], words.shape[-1] * per_word)


def pack_int32(fields: torch.Tensor, bits: int) -> torch.Tensor:  # fields: [..., m * 32/bits] -> [..., m] int32
    """The inverse of `unpack_int32`: field j of word w is fields[..., w * 32/bits + j], from the low bits up."""
    per_word = 32 // bits
    if fields.shape[-1] % per_word:
        raise ValueError(f"fields: last dim {fields.shape[-1]} is not a multiple of {per_word} (32/{bits} bits)")
    grouped = (fields.to(torch.int64) & ((1 << bits) - 1)).reshape(*fields.shape[:-1], -1, per_word)
    words = (grouped << torch.arange(0, 32, bits, device=fields.device)).sum(-1)
    return torch.where(words >= 1 << 31, words - (1 << 32), words).to(torch.int32)  # two's complement


def repeat_each(t: torch.Tensor, times: int, dim: int) -> torch.Tensor:  # t: 2-D; dim 0 or 1
    """repeat_interleave(times, dim) as expand + reshape: never a host sync (CUDA-graph capturable)."""
    rows, cols = t.shape
    if dim == 0:
        return t[:, None, :].expand(rows, times, cols).reshape(rows * times, cols)
    return t[:, :, None].expand(rows, cols, times).reshape(rows, cols * times)
