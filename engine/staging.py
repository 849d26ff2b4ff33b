"""A serving step's inputs: written on the host, sent to the device in one copy, read there by the step.

One class stages every step: a decode step (one token per row, padded to its graph bucket), a mixed step
(prefill chunks, with or without decode rows) and, in either, the sampler's inputs (temperature, top-k, top-p,
seed, step index), the logits processors' tensors (engine.penalties) and, for a model with recurrent layers,
the state slots and the slots to zero before the step. A staging lays its named inputs out in
one byte buffer (pinned on CUDA), sends it in one non_blocking copy to one device buffer, and hands out typed
views of that buffer. While its layout stays the same the views are the same tensors, so a captured graph reads
the same addresses at every replay: the runner keeps one staging per captured shape. On the CPU the device
buffer is a second host buffer, so the copy path runs there too.

The host writes through numpy views: a handful of small torch ops per step would cost more host time than the
step's smaller kernels take on the GPU.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from engine import penalties
from engine.penalties import RowProcessors
from engine.sampler import StepExtras, seed_bits

ALIGN = 16  # every input starts at a multiple of 16 bytes, so its typed view of the byte buffer is aligned
NUMPY = {torch.int64: np.int64, torch.int32: np.int32, torch.float32: np.float32}

Field = tuple[str, torch.dtype, tuple[int, ...]]  # name, dtype, shape


@dataclass(slots=True)
class StepRow:
    """One sequence's part of a serving step: `token_ids` at positions start.., then one sampled token."""

    token_ids: list[int]
    start: int  # tokens of the sequence already in the cache
    table: list[int]  # its block table, covering start + len(token_ids) tokens
    temperature: float = 0.0
    top_k: int = -1
    top_p: float = 1.0
    seed: int = 0
    step: int = 0  # index of the token being generated within its request
    state_slot: int = -1  # its recurrent-state slot (models with gated delta net layers; the scheduler's)
    logprobs: int = -1  # top-k logprobs of the sampled token (engine.logprobs); -1: none
    processors: RowProcessors | None = None  # penalties, bans, min_p (engine.penalties); None: none
    prompt_logprobs: int = -1  # top-k logprobs of prompt_targets, predicted by this row's positions
    prompt_targets: list[int] | None = None  # the prompt tokens after this row's first len() positions


def sampling_fields(rows: int, extras: StepExtras) -> list[Field]:
    """The sampler's inputs for `rows` rows, and the processors' when the step has any."""
    fields: list[Field] = [
        ("temperature", torch.float32, (rows,)),
        ("top_p", torch.float32, (rows,)),
        ("top_k", torch.int64, (rows,)),
        ("seeds", torch.int64, (rows,)),
        ("steps", torch.int64, (rows,)),
    ]
    if extras.proc_width:
        fields += [
            ("proc_tokens", torch.int64, (rows, extras.proc_width)),
            ("proc_weights", torch.int64, (rows, extras.proc_width)),
        ]
        fields += [(f"proc_{name}", torch.float32, (rows,)) for name in penalties.COLUMNS]
    return fields


class StepStaging:
    """A step's inputs in one host buffer and one device buffer (see the module's docstring).

    `stage_decode` and `stage_mixed` lay the inputs out and write them; `upload` copies them to the device and
    returns the device views, by name (a decode step's names are Runner.sample_step's arguments).
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._pin = device.type == "cuda"
        self._host = torch.zeros(0, dtype=torch.uint8)
        self._dev = torch.zeros(0, dtype=torch.uint8)
        self._used = 0  # bytes of the current layout
        self._layout: tuple[Field, ...] = ()
        self.host: dict[str, np.ndarray] = {}  # the inputs' host views, written by the stage_* methods
        self.views: dict[str, torch.Tensor] = {}  # their device views, what the step reads
        # set after each upload: the host buffer is rewritten only once the copy that reads it is done
        self._uploaded = torch.cuda.Event() if self._pin else None
        # the block table each row of the staging holds, and its length then: a table is only ever extended
        # (BlockManager.grow), so the same list at the same length is the same blocks and its row is not
        # rewritten; holding the list keeps it alive, so `is` cannot match a new list at a recycled address
        self._tables: list[list[int] | None] = []
        self._table_lens: list[int] = []
        self.resets = 0  # state slots the staged step zeroes before it runs (`reset_slots`; recurrent models)

    # --- the buffer ---------------------------------------------------------------
    def lay_out(self, fields: Sequence[Field]) -> None:
        """Place these inputs in the buffer (a no-op when they are the current ones). Waits until the last
        upload has read the host buffer. A new layout may move the device views: a staging whose views a
        captured graph reads is only ever given one layout."""
        if self._uploaded is not None:
            self._uploaded.synchronize()
        layout = tuple(fields)
        if layout == self._layout:
            return
        offsets, at = [], 0
        for _, dtype, shape in layout:
            offsets.append(at)
            at += -(-int(np.prod(shape, dtype=np.int64)) * dtype.itemsize // ALIGN) * ALIGN
        if at > self._host.numel():  # grown, never shrunk: a mixed step's sizes vary from step to step
            size = max(at, 2 * self._host.numel())
            with torch.inference_mode(False):  # plain tensors: a step staged in inference mode uploads outside it
                self._host = torch.zeros(size, dtype=torch.uint8, pin_memory=self._pin)
                self._dev = torch.zeros(size, dtype=torch.uint8, device=self.device)
        host_bytes = self._host.numpy()
        self.host, self.views = {}, {}
        for (name, dtype, shape), off in zip(layout, offsets):
            end = off + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            self.host[name] = host_bytes[off:end].view(NUMPY[dtype]).reshape(shape)
            self.views[name] = self._dev[off:end].view(dtype).view(shape)
        self._layout, self._used = layout, at
        rows = next((shape[0] for name, _, shape in layout if name == "block_tables"), 0)
        self._tables, self._table_lens = [None] * rows, [0] * rows

    def upload(self) -> dict[str, torch.Tensor]:
        """Copy the staged inputs to the device (one copy, on the current stream); the device views by name."""
        if self._uploaded is not None:
            self._dev[: self._used].copy_(self._host[: self._used], non_blocking=True)
            self._uploaded.record()
        else:  # a plain memcpy: torch's CPU copy of a few dozen KB splits across threads and waits on them
            self._dev.numpy()[: self._used] = self._host.numpy()[: self._used]
        return self.views

    # --- what a step stages ----------------------------------------------------------
    def stage_decode(
        self,
        rows: list[StepRow],
        padded: int,
        block_size: int,
        max_blocks: int,
        extras: StepExtras,
        vocab: int,
        state_scratch: int | None = None,  # the recurrent state's scratch slot (padding rows'); None: no state
    ) -> None:
        """A decode step of len(rows) rows padded to `padded`. Padding rows: token 0, no KV store (slot -1), one
        cached token read from block 0, the scratch state slot, greedy sampling, output ignored."""
        n = len(rows)
        if n > padded:
            raise ValueError(f"StepStaging.stage_decode: {n} rows for a padded batch of {padded}")
        fields: list[Field] = [
            ("input_ids", torch.int64, (padded,)),
            ("positions", torch.int64, (padded,)),
            ("slot_mapping", torch.int64, (padded,)),
            ("context_lens", torch.int32, (padded,)),
            ("block_tables", torch.int32, (padded, max_blocks)),
        ]
        if state_scratch is not None:
            fields += [("state_index", torch.int64, (padded,)), ("reset_slots", torch.int64, (padded,))]
        self.lay_out(fields + sampling_fields(padded, extras))
        h = self.host
        starts = [r.start for r in rows]
        h["input_ids"][:n], h["input_ids"][n:] = [r.token_ids[0] for r in rows], 0
        h["positions"][:n], h["positions"][n:] = starts, 0
        slots = [r.table[r.start // block_size] * block_size + r.start % block_size for r in rows]
        h["slot_mapping"][:n], h["slot_mapping"][n:] = slots, -1
        h["context_lens"][:n], h["context_lens"][n:] = [s + 1 for s in starts], 1
        if state_scratch is not None:
            h["state_index"][:n], h["state_index"][n:] = [r.state_slot for r in rows], state_scratch
            self._stage_resets(rows, state_scratch)
        self.write_tables([r.table for r in rows])
        self._stage_sampling(rows, extras, vocab)

    def stage_mixed(self, rows: list[StepRow], num_decode: int, block_size: int, extras: StepExtras, vocab: int,
                    state_scratch: int | None = None) -> None:  # fmt: skip
        """A mixed step, its one-token rows first (`num_decode` of them, the decode kernel reads them), then the
        prefill chunks. Besides a decode step's inputs (unpadded, one per token): `last`, each row's last
        token; `device_lens`, the chunks' lengths then their cached prefixes; with a recurrent state,
        `state_index` holds the decode rows' state slots only."""
        n, nd = len(rows), num_decode
        lens = [len(r.token_ids) for r in rows]
        tokens, width = sum(lens), max(len(r.table) for r in rows)
        fields: list[Field] = [
            ("input_ids", torch.int64, (tokens,)),
            ("positions", torch.int64, (tokens,)),
            ("slot_mapping", torch.int64, (tokens,)),
            ("last", torch.int64, (n,)),
            ("context_lens", torch.int32, (nd,)),
            ("device_lens", torch.int32, (2, n - nd)),
            ("block_tables", torch.int32, (n, width)),
        ]
        if state_scratch is not None:
            fields += [("state_index", torch.int64, (nd,)), ("reset_slots", torch.int64, (n,))]
        self.lay_out(fields + sampling_fields(n, extras))
        h, bs = self.host, block_size
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        for r in rows:
            span = range(r.start, r.start + len(r.token_ids))
            ids += r.token_ids
            positions += span
            slots += [r.table[p // bs] * bs + p % bs for p in span]
        h["input_ids"][:], h["positions"][:], h["slot_mapping"][:] = ids, positions, slots
        h["last"][:] = list(itertools.accumulate(lens, initial=-1))[1:]
        h["context_lens"][:] = [r.start + 1 for r in rows[:nd]]
        h["device_lens"][0], h["device_lens"][1] = lens[nd:], [r.start for r in rows[nd:]]
        if state_scratch is not None:
            h["state_index"][:] = [r.state_slot for r in rows[:nd]]
            self._stage_resets(rows, state_scratch)
        self.write_tables([r.table for r in rows])
        self._stage_sampling(rows, extras, vocab)

    def set_tokens(self, tokens: list[int]) -> None:
        """Rewrite a staged decode step's input tokens (a step staged before its tokens were known)."""
        self.host["input_ids"][: len(tokens)] = tokens

    def write_tables(self, tables: list[list[int]]) -> None:
        """The rows' block tables into `block_tables`, zero beyond each table; rows past len(tables) read block 0.
        A table list may grow between steps but its blocks never change (BlockManager's tables): a row given the
        same list again is written from its new blocks on."""
        out = self.host["block_tables"]
        m = out.shape[1]
        held, held_lens = self._tables, self._table_lens
        for row, blocks in enumerate(tables):
            k = len(blocks)
            if blocks is held[row] and k == held_lens[row]:
                continue  # this row already holds exactly these blocks
            if k > m:
                raise ValueError(f"StepStaging: row {row} has {k} blocks, the table holds {m}")
            was = held_lens[row]
            if blocks is held[row] and k > was:
                out[row, was:k] = blocks[was:]  # only the blocks added since
            else:
                out[row, :k] = blocks
                if was > k:
                    out[row, k:was] = 0
            held[row], held_lens[row] = blocks, k
        for row in range(len(tables), len(held)):  # padding rows read block 0
            if held_lens[row] or held[row] is not None:
                out[row, : held_lens[row]] = 0
                held[row], held_lens[row] = None, 0

    def _stage_resets(self, rows: list[StepRow], state_scratch: int) -> None:
        """`reset_slots`: the state slots of the rows that start at token 0 (a new or a recomputed sequence, whose
        slot may hold a finished or a preempted sequence's state), then the scratch slot; `resets` counts them."""
        fresh = [r.state_slot for r in rows if r.start == 0]
        self.resets = len(fresh)
        out = self.host["reset_slots"]
        out[: self.resets], out[self.resets :] = fresh, state_scratch

    def _stage_sampling(self, rows: list[StepRow], extras: StepExtras, vocab: int) -> None:
        """The sampler's inputs; rows past len(rows) are greedy padding (temperature 0, no top-k or top-p)."""
        n, h = len(rows), self.host
        h["temperature"][:n], h["temperature"][n:] = [r.temperature for r in rows], 0.0
        h["top_p"][:n], h["top_p"][n:] = [r.top_p for r in rows], 1.0
        h["top_k"][:n], h["top_k"][n:] = [r.top_k for r in rows], -1
        h["seeds"][:n], h["seeds"][n:] = [seed_bits(r.seed) for r in rows], 0
        h["steps"][:n], h["steps"][n:] = [r.step for r in rows], 0
        if extras.proc_width:
            penalties.fill([r.processors for r in rows], vocab, {k[5:]: v for k, v in h.items() if k[:5] == "proc_"})
