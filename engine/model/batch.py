"""The per-forward attention inputs the runner builds and every attention layer reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from engine.flags import FlagSnapshot


@dataclass
class ForwardBatch:
    """One forward pass over packed tokens: a prefill of whole prompts, or one decode token per sequence.

    Passed explicitly down the model (no global context), so a captured decode step
    reads exactly the static buffers it was captured with, and every op picks its kernel
    arm from the same flag snapshot (the Runner's).
    """

    is_prefill: bool
    slot_mapping: torch.Tensor  # [tokens] int64, flat KV slot per token, -1 skips the store
    kv_caches: list[tuple[torch.Tensor, torch.Tensor]]  # per layer: k, v [num_blocks, block_size, kv_heads, head_dim]
    seq_lens: list[int] | None = None  # prefill: prompt lengths, packed back to back
    block_tables: torch.Tensor | None = None  # decode: [batch, max_blocks] int32, -1 padded
    context_lens: torch.Tensor | None = None  # decode: [batch] int32, tokens in the cache including this one
    # prefill of chunks that continue cached sequences: tokens already cached before each chunk; with
    # any nonzero, attention reads each sequence's keys from the paged cache (block_tables: [seqs, max_blocks])
    prefix_lens: list[int] | None = None
    # a serving step (Runner.run_step): its first `num_decode` tokens are decode rows (one token each after
    # its cached ones; block_tables' first rows, context_lens), read by paged_decode_attention; seq_lens and
    # prefix_lens are the other rows', in order after them, and `device_lens` ([2, those rows] int32) holds
    # the same two lists on the device, uploaded once for every layer's varlen attention call
    num_decode: int = 0
    device_lens: torch.Tensor | None = None
    flags: FlagSnapshot = field(default_factory=FlagSnapshot.defaults)  # the kernel arms' flags (engine/kernels/)
    # gated delta net layers (Qwen3-Next): the runner's per-sequence recurrent state (a
    # qwen3_next.RecurrentState) and each sequence's slot in it: `state_slots` for a prefill (one per
    # sequence, host ints), `state_index` for a decode step ([batch] int64 on the device; padding rows
    # name the scratch slot)
    recurrent: Any = None
    state_slots: list[int] | None = None
    state_index: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.is_prefill and self.seq_lens is None:
            raise ValueError("ForwardBatch: a prefill needs seq_lens")
        if not self.is_prefill and (self.block_tables is None or self.context_lens is None):
            raise ValueError("ForwardBatch: a decode step needs block_tables and context_lens")
