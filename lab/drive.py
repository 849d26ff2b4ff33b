"""Driving the engine through its public API: greedy generation through `engine.LLM`, and single steps through
`Runner.run_step` for the benchmarks that time or profile one decode step.

Both run the engine's one decode program (`Runner.sample_step`, greedy at temperature 0): what a gate or a
benchmark measures is what a user runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from engine.flags import FlagSnapshot
from engine.llm import LLM
from engine.runner import PreparedDecode, Runner, StepRow
from engine.sampling_params import SamplingParams

BLOCK_SIZE = 16  # LLM's default KV block
DEFAULT_BATCHED_TOKENS = 2048  # LLM's default step budget; a larger batch of prompts gets one step for all


def greedy_llm(
    model_dir: str | Path,
    dtype: str | torch.dtype,
    device: str,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    flags: FlagSnapshot | None = None,
    block_size: int = BLOCK_SIZE,
) -> LLM:
    """The engine as a user builds it, sized so that these prompts run as one batch: all of them prefilled in
    one step (a budget of at least their tokens), then decoded together, in a KV cache of every sequence's
    worst case."""
    longest = max(len(p) for p in prompts) + max_new_tokens
    return LLM(
        model_dir,
        dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch."),
        device,
        max_num_seqs=len(prompts),
        max_model_len=longest,
        num_blocks=len(prompts) * -(-longest // block_size),
        block_size=block_size,
        max_num_batched_tokens=max(DEFAULT_BATCHED_TOKENS, sum(len(p) for p in prompts)),
        flags=flags,
    )


def greedy(llm: LLM, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
    """Greedy ids through LLM.generate, exactly max_new_tokens per prompt (EOS ignored)."""
    params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, ignore_eos=True)
    return [out.token_ids for out in llm.generate([list(p) for p in prompts], params)]


def greedy_tokens(
    model_dir: str | Path,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    dtype: str | torch.dtype = "float32",
    device: str = "cpu",
    flags: FlagSnapshot | None = None,
    block_size: int = BLOCK_SIZE,
) -> list[list[int]]:
    """greedy() on a fresh greedy_llm()."""
    llm = greedy_llm(model_dir, dtype, device, prompts, max_new_tokens, flags, block_size)
    return greedy(llm, prompts, max_new_tokens)


class Session:
    """Sequences stepped one serving step at a time through Runner.run_step (greedy): a prefill of the
    prompts, then decode steps. Each sequence's id is its recurrent-state slot (a Qwen3-Next's)."""

    def __init__(self, runner: Runner, seq_ids: Sequence[int], prompts: Sequence[Sequence[int]]) -> None:
        self.runner, self.seq_ids = runner, list(seq_ids)
        self.prompts = [list(p) for p in prompts]
        blocks = runner.blocks
        for sid, prompt in zip(self.seq_ids, self.prompts):
            if sid in blocks.tables:  # a later session on the same ids starts them afresh
                blocks.free(sid)
            blocks.allocate(sid, len(prompt))
        self.last: list[int] = []

    def prefill(self) -> list[int]:
        """The whole prompts in one step; each one's first generated token."""
        tables = self.runner.blocks.tables
        rows = [StepRow(p, 0, tables[s], state_slot=s) for s, p in zip(self.seq_ids, self.prompts)]
        self.last = self.runner.run_step(rows, decode=False)
        return self.last

    def decode_rows(self) -> list[StepRow]:
        """The next decode step's rows (each sequence's last token); appends its KV slot."""
        blocks = self.runner.blocks
        rows = []
        for sid, token in zip(self.seq_ids, self.last):
            start = blocks.lengths[sid]
            blocks.append_token(sid)
            rows.append(StepRow([token], start, blocks.tables[sid], state_slot=sid))
        return rows

    def decode(self) -> list[int]:
        """One decode step of every sequence (the captured program on CUDA); the tokens it chose."""
        self.last = self.runner.run_step(self.decode_rows(), decode=True)
        return self.last

    def prepare(self) -> PreparedDecode:
        """The next decode step staged, not run: its `device_inputs()` are Runner.sample_step's arguments."""
        return self.runner.prepare_decode(self.decode_rows())

    def close(self) -> None:
        for sid in self.seq_ids:
            if sid in self.runner.blocks.tables:
                self.runner.blocks.free(sid)
