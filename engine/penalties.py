"""vLLM's logits processors on the device, inside the step: repetition, frequency and presence penalties, the
tokens min_tokens bans, and min_p. A batch with none of them skips this module entirely.

vLLM's definitions (its `apply_penalties` and min_p processor), per row:
- repetition r: every token seen in the prompt or the output so far has its logit divided by r if positive,
  multiplied by r otherwise;
- frequency f and presence p, over the output tokens only: logit -= f * count(token) + p * (count(token) > 0);
- min_tokens: until the request has that many output tokens, its stop tokens (and EOS) get -inf;
- min_p m, after the temperature T: a token whose probability is below m times the most probable one's is
  dropped (-inf), i.e. (logit - max logit) / T < log(m). Greedy rows keep their argmax either way.
The penalties apply to the raw logits, before the temperature, as vLLM applies them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

# one token list per row packs three kinds by weight into one int64 scatter: output tokens count 1, prompt
# tokens 2**20 (a prompt or an output holds fewer than 2**20 tokens), banned tokens 2**40
PROMPT_WEIGHT = 1 << 20
BANNED_WEIGHT = 1 << 40


@dataclass(frozen=True, slots=True)
class RowProcessors:
    """One row's processors as the host gives them (neutral values: none of it applies)."""

    presence: float = 0.0
    frequency: float = 0.0
    repetition: float = 1.0
    min_p: float = 0.0
    prompt: tuple[int, ...] | list[int] = ()  # the prompt tokens (needed only with a repetition penalty)
    output: tuple[int, ...] | list[int] = ()  # the output tokens so far
    banned: tuple[int, ...] | frozenset[int] = ()  # tokens that may not be sampled this step

    @property
    def penalized(self) -> bool:
        return self.presence != 0 or self.frequency != 0 or self.repetition != 1 or bool(self.banned)


COLUMNS = ("presence", "frequency", "repetition", "min_p")  # the per-row values, after tokens and weights
NEUTRAL = (0.0, 0.0, 1.0, 0.0)  # their values in a row without processors


def _token_lists(rows: Sequence[RowProcessors | None]) -> list[tuple[list[int], list[int]]]:
    """Per row the tokens its penalties and bans act on, and their weights."""
    lists: list[tuple[list[int], list[int]]] = []
    for r in rows:
        if r is None or not r.penalized:
            lists.append(([], []))
            continue
        ids = list(r.output) + (list(r.prompt) if r.repetition != 1 else []) + list(r.banned)
        w = [1] * len(r.output) + [PROMPT_WEIGHT] * (len(ids) - len(r.output) - len(r.banned))
        lists.append((ids, w + [BANNED_WEIGHT] * len(r.banned)))
    return lists


def width(rows: Sequence[RowProcessors | None]) -> int:
    """The token columns `fill` needs for these rows: a power of two (at least 1), so a captured step sees few
    shapes."""
    longest = max((len(ids) for ids, _ in _token_lists(rows)), default=0)
    return 1 << max(0, longest - 1).bit_length()


def fill(rows: Sequence[RowProcessors | None], vocab: int, out: dict[str, np.ndarray]) -> None:
    """Write `apply`'s inputs into host arrays (`tokens` and `weights` [padded, width], each of COLUMNS
    [padded]): per row its tokens and their weights (padding: the spare column `vocab`, weight 0); rows past
    len(rows) and rows without processors are neutral."""
    tokens, weights = out["tokens"], out["weights"]
    tokens[:], weights[:] = vocab, 0
    for i, (ids, ws) in enumerate(_token_lists(rows)):
        tokens[i, : len(ids)] = ids
        weights[i, : len(ws)] = ws
    for j, name in enumerate(COLUMNS):
        out[name][:] = NEUTRAL[j]
        out[name][: len(rows)] = [NEUTRAL[j] if r is None else getattr(r, name) for r in rows]


def pack(rows: list[RowProcessors | None], padded: int, vocab: int) -> dict[str, torch.Tensor]:
    """`fill` into new host tensors, named as `apply`'s arguments."""
    w = width(rows)
    out: dict[str, np.ndarray] = {"tokens": np.zeros((padded, w), np.int64), "weights": np.zeros((padded, w), np.int64)}
    out |= {name: np.zeros(padded, np.float32) for name in COLUMNS}
    fill(rows, vocab, out)
    return {name: torch.from_numpy(a) for name, a in out.items()}


def apply(
    logits: torch.Tensor,  # [rows, vocab]
    temperature: torch.Tensor,  # [rows] fp32 (0: greedy)
    tokens: torch.Tensor,  # [rows, width] int64, `vocab` for padding
    weights: torch.Tensor,  # [rows, width] int64
    presence: torch.Tensor,  # [rows] fp32
    frequency: torch.Tensor,  # [rows] fp32
    repetition: torch.Tensor,  # [rows] fp32
    min_p: torch.Tensor,  # [rows] fp32
    penalize: bool = True,  # False: no row has a penalty or a ban (the scatter is skipped)
) -> torch.Tensor:  # [rows, vocab] fp32
    """The processed logits; device ops only, no host reads (capturable)."""
    rows, vocab = logits.shape
    out = logits.float()
    if penalize:
        packed = torch.zeros((rows, vocab + 1), dtype=torch.int64, device=logits.device)
        packed = packed.scatter_add_(1, tokens, weights)[:, :vocab]
        counts = (packed % PROMPT_WEIGHT).float()
        seen_prompt = (packed // PROMPT_WEIGHT) % (BANNED_WEIGHT // PROMPT_WEIGHT) > 0
        banned = packed >= BANNED_WEIGHT
        rep = torch.where(seen_prompt | (counts > 0), repetition[:, None], 1.0)
        out = torch.where(out > 0, out / rep, out * rep)
        out = out - frequency[:, None] * counts - presence[:, None] * (counts > 0).float()
        out = out.masked_fill(banned, float("-inf"))
    t = torch.where(temperature > 0, temperature, 1.0)[:, None]
    scaled = out / t
    floor = torch.log(min_p.clamp_min(1e-30))[:, None]  # min_p 0: log(1e-30), far below any gap that matters
    drop = (scaled - scaled.amax(dim=-1, keepdim=True) < floor) & (min_p > 0)[:, None]
    return out.masked_fill(drop, float("-inf"))
