"""One request as the scheduler sees it: its tokens, how many are in the KV cache, and its state."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from engine.sampling_params import SamplingParams


class Status(str, Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    seq_id: int
    index: int  # the request's place in the caller's prompt list
    token_ids: list[int]  # the prompt, then every generated token
    num_prompt_tokens: int
    params: SamplingParams
    seed: int  # the request's resolved seed (SamplingParams.seed, or drawn from the engine's generator)
    status: Status = Status.WAITING
    num_computed: int = 0  # leading tokens whose K/V are in the cache
    num_cached: int = 0  # of those, how many the prefix cache supplied at the last admission
    state_slot: int = -1  # its recurrent-state slot while running (models with gated delta net layers), else -1
    finish_reason: str | None = None
    # set by Scheduler.add: the tokens that end the request (its stop tokens, and EOS unless ignored), and the
    # length at which it ends (prompt + max_tokens, or max_model_len if shorter)
    stop_ids: frozenset[int] = frozenset()
    length_limit: int = 1 << 62
    stats: dict[str, int] = field(default_factory=lambda: {"preemptions": 0})
    logprobs: list[Any] = field(default_factory=list)  # per output token, with SamplingParams.logprobs

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def output_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]
