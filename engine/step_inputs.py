"""One decode step's inputs for a padded batch: packed host staging and the device tensors a graph reads.

The five inputs live in two packed buffers (int64: ids, positions, slots; int32: context lengths and
block tables), so a step costs two host-to-device copies; on CUDA the staging is pinned and the copies
are asynchronous. The host fills the staging through numpy views: a handful of small torch ops per step
would cost more host time than the step's smaller kernels take on the GPU. A model with recurrent layers
(`state_scratch` given) has a sixth input in the int64 buffer: each row's recurrent-state slot, the
scratch slot for padding rows.
"""

from __future__ import annotations

import torch


class StepInputs:
    def __init__(self, padded: int, max_blocks: int, device: torch.device, state_scratch: int | None = None) -> None:
        self.padded, self.max_blocks, self.device = padded, max_blocks, device
        self.state_scratch = state_scratch
        pin = device.type == "cuda"
        n64 = (3 if state_scratch is None else 4) * padded
        self.host64 = torch.zeros(n64, dtype=torch.int64, pin_memory=pin)
        self.host32 = torch.zeros(padded * (1 + max_blocks), dtype=torch.int32, pin_memory=pin)
        self.dev64 = torch.zeros(n64, dtype=torch.int64, device=device) if pin else self.host64
        self.dev32 = torch.zeros(padded * (1 + max_blocks), dtype=torch.int32, device=device) if pin else self.host32
        self._n64, self._n32 = self.host64.numpy(), self.host32.numpy()
        # the block table each row of the staging holds, and its length then: a table is only ever extended
        # (BlockManager.grow), so the same list at the same length is the same blocks and its row is not
        # rewritten; holding the list keeps it alive, so `is` cannot match a new list at a recycled address
        self._tables: list[list[int] | None] = [None] * padded
        self._table_lens = [0] * padded
        # set after each upload; the staging is rewritten only once the copies that read it are done
        self._uploaded = torch.cuda.Event() if pin else None
        self.device_views = self._views(self.dev64, self.dev32)

    def _views(self, t64: torch.Tensor, t32: torch.Tensor) -> dict[str, torch.Tensor]:
        p = self.padded
        views = {
            "input_ids": t64[:p],
            "positions": t64[p : 2 * p],
            "slot_mapping": t64[2 * p : 3 * p],
            "context_lens": t32[:p],
            "block_tables": t32[p:].view(p, self.max_blocks),
        }
        if self.state_scratch is not None:
            views["state_index"] = t64[3 * p :]
        return views

    def fill(
        self,
        tokens: list[int],
        positions: list[int],
        slots: list[int],
        tables: list[list[int]],
        state_slots: list[int] | None = None,
    ) -> None:
        """Rows beyond len(tokens) are padding: token 0, no KV store (slot -1), one cached token read from
        block 0, the scratch state slot, output ignored. A table list may grow between fills but its blocks
        never change (BlockManager's tables): a row given the same list again is written from its new blocks on."""
        n, p, m = len(tokens), self.padded, self.max_blocks
        if not n == len(positions) == len(slots) == len(tables) or n > p:
            raise ValueError(
                f"StepInputs.fill: {n} tokens, {len(positions)} positions, {len(slots)} slots, "
                f"{len(tables)} tables for a padded batch of {p}"
            )
        if self._uploaded is not None:
            self._uploaded.synchronize()
        n64, n32 = self._n64, self._n32
        n64[:n], n64[n:p] = tokens, 0
        n64[p : p + n], n64[p + n : 2 * p] = positions, 0
        n64[2 * p : 2 * p + n], n64[2 * p + n : 3 * p] = slots, -1
        if self.state_scratch is not None:
            if state_slots is None or len(state_slots) != n:
                raise ValueError(f"StepInputs.fill: {n} rows need their {n} recurrent-state slots")
            n64[3 * p : 3 * p + n], n64[3 * p + n :] = state_slots, self.state_scratch
        n32[:n], n32[n:p] = [q + 1 for q in positions], 1
        held, held_lens = self._tables, self._table_lens
        for row, blocks in enumerate(tables):
            k = len(blocks)
            if blocks is held[row] and k == held_lens[row]:
                continue  # this row already holds exactly these blocks
            if k > m:
                raise ValueError(f"StepInputs.fill: row {row} has {k} blocks, the table holds {m}")
            start = p + row * m
            was = held_lens[row]
            if blocks is held[row] and k > was:
                n32[start + was : start + k] = blocks[was:]  # only the blocks added since
            else:
                n32[start : start + k] = blocks
                if was > k:
                    n32[start + k : start + was] = 0
            held[row], held_lens[row] = blocks, k
        for row in range(n, p):  # padding rows read block 0
            if held_lens[row] or held[row] is not None:
                start = p + row * m
                n32[start : start + held_lens[row]] = 0
                held[row], held_lens[row] = None, 0

    def set_tokens(self, tokens: list[int]) -> None:
        """Rewrite the filled rows' input tokens (a step prepared before its tokens were known)."""
        self._n64[: len(tokens)] = tokens

    def upload(self) -> dict[str, torch.Tensor]:
        """Copy the staging to the device (on the current stream) and return the device views."""
        if self._uploaded is not None:
            self.dev64.copy_(self.host64, non_blocking=True)
            self.dev32.copy_(self.host32, non_blocking=True)
            self._uploaded.record()
        return self.device_views
