"""Continuous batching: waiting and running queues, chunked prefill, preemption by recompute.

Each step gets a token budget (`max_num_batched_tokens`). Running sequences go first, in admission
order: one token each when decoding, or the next chunk of a prompt that did not fit in one step.
When a running sequence needs a block and none is free, the most recently admitted running sequence
is preempted: its blocks are freed and it goes back to the front of the waiting queue, to be
recomputed from its tokens (prompt and output so far) when it is admitted again. With budget left
and no preemption this step, waiting sequences are admitted (up to `max_num_seqs` running), each
with as much of its prompt as fits; the prefix cache supplies their leading full blocks.
A step in which every row decodes one token is a decode step (the runner's captured graph);
any other is a mixed step of prefill chunks and decode rows.

Models with recurrent layers (Qwen3-Next's gated delta nets) keep a state per sequence beside its
KV blocks: with `num_state_slots` > 0 every running sequence holds one of that many slots, taken on
admission and given back on finish, abort and preemption. A sequence admitted (again) computes from
token 0, and the runner starts a row at position 0 from a zero state, so a preempted sequence's
recompute never reads its old state.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from engine.block_manager import BlockManager
from engine.sequence import Sequence, Status

PLACEHOLDER = -1  # a decode step's token before it is read back (advance, then settle)


@dataclass
class ScheduledStep:
    rows: list[tuple[Sequence, int]]  # each sequence with how many of its tokens this step computes
    decode: bool  # every row computes exactly its last token


class Scheduler:
    def __init__(
        self,
        blocks: BlockManager,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        eos_token_ids: frozenset[int] = frozenset(),
        max_model_len: int | None = None,
        num_state_slots: int = 0,
    ) -> None:
        if max_num_seqs < 1 or max_num_batched_tokens < 1:
            raise ValueError(
                f"Scheduler: max_num_seqs={max_num_seqs} and max_num_batched_tokens="
                f"{max_num_batched_tokens} must be positive"
            )
        self.blocks = blocks
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.eos_token_ids = eos_token_ids
        self.max_model_len = max_model_len
        self.num_state_slots = num_state_slots
        self._free_slots = list(range(num_state_slots - 1, -1, -1))  # popped from the end: slot 0 first
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.stats = {"steps": 0, "decode_steps": 0, "computed_tokens": 0, "prefix_cached_tokens": 0, "preemptions": 0}

    def add(self, seq: Sequence) -> None:
        p = seq.params
        seq.stop_ids = frozenset(p.stop_token_ids) | (frozenset() if p.ignore_eos else self.eos_token_ids)
        seq.length_limit = seq.num_prompt_tokens + p.max_tokens
        if self.max_model_len is not None:
            seq.length_limit = min(seq.length_limit, self.max_model_len)
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> ScheduledStep:
        budget = self.max_num_batched_tokens
        rows: list[tuple[Sequence, int]] = []
        preempted = False
        decode = True  # every row so far computes exactly its last token
        tables, bs = self.blocks.tables, self.blocks.block_size
        running = self.running
        i = 0
        while i < len(running) and budget > 0:
            seq = running[i]
            left = len(seq.token_ids) - seq.num_computed
            n = left if left < budget else budget
            end = seq.num_computed + n
            if end > len(tables[seq.seq_id]) * bs:  # a new block (most steps need none)
                while not self.blocks.grow(seq.seq_id, end):
                    self._preempt(running.pop())  # the most recently admitted
                    preempted = True
                    if seq.status is not Status.RUNNING:
                        break
                if seq.status is not Status.RUNNING:
                    break  # it preempted itself: it was the last running sequence
            rows.append((seq, n))
            decode = decode and n == 1 and left == 1
            budget -= n
            i += 1
        while not preempted and self.waiting and len(self.running) < self.max_num_seqs and budget > 0:
            seq = self.waiting[0]
            if self.num_state_slots and not self._free_slots:
                break
            cached = self.blocks.allocate_prompt(seq.seq_id, seq.token_ids, 0, seq.params.prompt_logprobs is None)
            if cached is None:
                break
            # the chunk is sized after the cache lookup: cached tokens cost no budget
            n = min(seq.num_tokens - cached, budget)
            if not self.blocks.grow(seq.seq_id, cached + n):
                self.blocks.free(seq.seq_id)
                break
            self.waiting.popleft()
            seq.status, seq.num_computed, seq.num_cached = Status.RUNNING, cached, cached
            if self.num_state_slots:
                seq.state_slot = self._free_slots.pop()
            self.stats["prefix_cached_tokens"] += cached
            self.running.append(seq)
            rows.append((seq, n))
            decode = decode and n == 1 and seq.num_tokens - cached == 1
            budget -= n
        return ScheduledStep(rows, decode and bool(rows))

    def postprocess(self, step: ScheduledStep, sampled: list[int]) -> list[Sequence]:
        """Advance each row by what it computed; a row that reached its last token takes its sampled
        token. Returns the sequences that finished (their blocks already freed)."""
        stats = self.stats
        stats["steps"] += 1
        stats["decode_steps"] += step.decode
        caching = self.blocks.prefix_caching
        finished = []
        computed = 0
        for (seq, n), token in zip(step.rows, sampled):
            seq.num_computed += n
            computed += n
            if caching:
                self.blocks.mark_computed(seq.seq_id, seq.token_ids, seq.num_computed)
            ids = seq.token_ids
            if seq.num_computed < len(ids):
                continue  # a prefill chunk short of the end: its sample is not a token of the request
            ids.append(token)
            if token in seq.stop_ids or len(ids) >= seq.length_limit:
                self.finish(seq, self._finish_reason(seq, token))
                finished.append(seq)
        stats["computed_tokens"] += computed
        return finished

    def advance(self, step: ScheduledStep) -> list[Sequence]:
        """A decode step's postprocess before its tokens are read: each row takes a PLACEHOLDER token, and a row
        at its length limit ends ("length"; blocks and slot freed). settle() writes the tokens in later; until
        then the next step can be scheduled, as token counts are all it needs. Returns the ended sequences."""
        assert step.decode
        stats = self.stats
        stats["steps"] += 1
        stats["decode_steps"] += 1
        stats["computed_tokens"] += len(step.rows)
        caching = self.blocks.prefix_caching
        ended = []
        for seq, _ in step.rows:
            if seq.status is Status.FINISHED:
                continue  # aborted while its step ran: its blocks are gone
            seq.num_computed += 1
            if caching:  # the tokens up to num_computed are known: the placeholder comes after them
                self.blocks.mark_computed(seq.seq_id, seq.token_ids, seq.num_computed)
            seq.token_ids.append(PLACEHOLDER)
            if len(seq.token_ids) >= seq.length_limit:
                self.finish(seq, "length")
                ended.append(seq)
        return ended

    def settle(self, step: ScheduledStep, sampled: list[int]) -> list[Sequence]:
        """The advanced step's tokens in place of its placeholders; a row whose token is a stop token or EOS
        ends with "stop" (also one that advance ended by length). Returns the sequences ended here."""
        stopped = []
        for (seq, _), token in zip(step.rows, sampled):
            if seq.finish_reason == "abort":
                continue  # aborted while its step ran (advance skipped it)
            assert seq.token_ids[-1] == PLACEHOLDER, "settle: the sequence moved on before its token was read"
            seq.token_ids[-1] = token
            if token in seq.stop_ids:
                if seq.status is Status.FINISHED:
                    seq.finish_reason = "stop"
                else:
                    self.finish(seq, "stop")
                    stopped.append(seq)
        return stopped

    def finish(self, seq: Sequence, reason: str) -> None:
        """End a sequence wherever it is (running or waiting) and free its blocks and state slot."""
        self._release(seq)
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        seq.status, seq.finish_reason = Status.FINISHED, reason

    def abort_all(self) -> None:
        """Free every block of every queued sequence (an error mid-run must not leak the cache)."""
        for seq in [*self.running, *self.waiting]:
            self.finish(seq, "abort")

    @staticmethod
    def _finish_reason(seq: Sequence, token: int) -> str:
        """Why a sequence that took `token` ends: a stop token or EOS ("stop"), else its length limit
        (max_tokens or max_model_len: "length")."""
        return "stop" if token in seq.stop_ids else "length"

    def check_empty(self) -> None:
        """Raise if a block or a state slot is still held: after every request ended, all must be free."""
        self.blocks.check_empty()
        if len(self._free_slots) != self.num_state_slots:
            held = sorted(set(range(self.num_state_slots)) - set(self._free_slots))
            raise AssertionError(
                f"leaked state slots: {held[:16]} held, {len(self._free_slots)} of {self.num_state_slots} free"
            )

    def _release(self, seq: Sequence) -> None:
        if seq.seq_id in self.blocks.tables:
            self.blocks.free(seq.seq_id)
        if seq.state_slot >= 0:
            self._free_slots.append(seq.state_slot)
            seq.state_slot = -1

    def _preempt(self, seq: Sequence) -> None:
        self._release(seq)
        seq.status, seq.num_computed = Status.WAITING, 0
        seq.stats["preemptions"] += 1
        self.stats["preemptions"] += 1
        self.waiting.appendleft(seq)
