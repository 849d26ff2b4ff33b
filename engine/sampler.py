"""Per-request sampling on the device in torch ops only, so it runs inside a captured decode step.

Each row draws from softmax(logits / T) restricted to its top-k set and then its top-p nucleus (the
reference's sets, `engine.ops.sample`), by the Gumbel-max rule: argmax(logits / T + G) with G a
standard Gumbel variable per token. G comes from a counter-based hash of (the request's seed, the
index of the token being generated, the vocabulary index): no generator state, so a request's draw
depends on nothing else in the batch, and a request recomputed after preemption draws the same tokens.
Rows with temperature 0 take greedy_argmax of the unscaled logits: exactly greedy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch

from engine import kernels, penalties
from engine.flags import FlagSnapshot
from engine.logprobs import device_logprobs, graph_width
from engine.ops.sample import gumbel

__all__ = ["NO_EXTRAS", "Mode", "StepExtras", "gumbel", "sample", "sample_with_extras", "seed_bits"]


class Mode(str, Enum):
    """What a batch needs: one captured graph per (padded batch size, mode)."""

    GREEDY = "greedy"  # every row has temperature 0
    RANDOM = "random"  # some row samples; no row restricts top-k or top-p
    FILTERED = "filtered"  # some row samples with top-k < vocab or top-p < 1


def sample(
    flags: FlagSnapshot,  # the caller's (a Runner's) snapshot: the argmax arm comes from the kernel table
    logits: torch.Tensor,  # [batch, vocab], any float dtype
    temperature: torch.Tensor,  # [batch] float32, >= 0 (0: greedy)
    top_k: torch.Tensor,  # [batch] int64, <= 0 or >= vocab: off
    top_p: torch.Tensor,  # [batch] float32 in (0, 1]
    seeds: torch.Tensor,  # [batch] int64
    steps: torch.Tensor,  # [batch] int64: index of the token being generated within its request
    mode: Mode = Mode.FILTERED,
) -> torch.Tensor:  # [batch] int64
    """One token per row through the table's greedy_argmax and sample_rows ops; no host reads, so it can be
    captured (every input a device tensor)."""
    greedy = kernels.greedy_argmax(flags, logits)
    if mode is Mode.GREEDY:
        return greedy
    drawn = kernels.sample_rows(flags, logits, temperature, top_k, top_p, seeds, steps, mode is Mode.FILTERED)
    return torch.where(temperature > 0, drawn, greedy)


def seed_bits(seed: int) -> int:
    """Any Python int as the signed int64 with the same low 64 bits."""
    bits = seed % (1 << 64)
    return bits - (1 << 64) if bits >= 1 << 63 else bits


@dataclass(frozen=True, slots=True)
class StepExtras:
    """What a step computes besides its tokens: logprobs (a top-k width for the batch) and logits processors
    (penalties, bans, min_p; engine.penalties). `key` names the captured graph that computes exactly this; a
    batch that asks for none of it has `none` set and runs the plain sampler."""

    width: int = -1  # the logprobs' top-k width (engine.logprobs.graph_width); -1: no logprobs
    proc_width: int = 0  # token columns of the processors' tensors (engine.penalties.width); 0: no processors
    penalize: bool = False  # some row has a penalty or a ban (else the processors apply min_p only)

    @classmethod
    def of(cls, rows: Sequence[Any]) -> StepExtras:
        """A step's extras from its rows (anything with `logprobs` and `processors` attributes: StepRow)."""
        width = graph_width(max((r.logprobs for r in rows), default=-1))
        procs = [r.processors for r in rows]
        if all(p is None for p in procs):
            return cls(width)
        return cls(width, penalties.width(procs), any(p is not None and p.penalized for p in procs))

    @property
    def key(self) -> tuple[int, int, bool]:
        return (self.width, self.proc_width, self.penalize)

    @property
    def none(self) -> bool:
        return self.width < 0 and not self.proc_width


NO_EXTRAS = StepExtras()


def sample_with_extras(
    flags: FlagSnapshot,
    logits: torch.Tensor,  # [batch, vocab]
    mode: Mode,
    inputs: Mapping[str, torch.Tensor],  # a staged step's device views (engine.staging): the sampler's, proc_*
    extras: StepExtras = NO_EXTRAS,
) -> Any:  # [batch] int64, or (tokens, logprob, rank, top values, top ids) with logprobs
    """The logits processors, then the sampler, then the raw logprobs of what it drew: device ops only."""
    raw = logits
    if extras.proc_width:
        logits = penalties.apply(
            logits,
            inputs["temperature"],
            inputs["proc_tokens"],
            inputs["proc_weights"],
            inputs["proc_presence"],
            inputs["proc_frequency"],
            inputs["proc_repetition"],
            inputs["proc_min_p"],
            penalize=extras.penalize,
        )
    temperature, top_k, top_p, seeds, steps = (inputs[k] for k in ("temperature", "top_k", "top_p", "seeds", "steps"))
    tokens = sample(flags, logits, temperature, top_k, top_p, seeds, steps, mode)
    if extras.width < 0:
        return tokens
    return (tokens, *device_logprobs(raw, tokens, extras.width))
