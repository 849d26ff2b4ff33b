"""Logprobs with vLLM's meanings, computed on the device inside the step; only k values per row come back.

Which distribution: the raw one, `log_softmax(logits)` of the model's logits before penalties, temperature,
min_p, top-k and top-p (vLLM's default `logprobs_mode="raw_logprobs"`). Per generated token a request with
`logprobs=k` gets the sampled token's logprob and rank (1 = the most probable) and the k most probable
tokens; `prompt_logprobs=k` gives the same for every prompt token after the first (the first has none).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.sampling_params import MAX_LOGPROBS


@dataclass(frozen=True, slots=True)
class Logprob:
    logprob: float
    rank: int  # 1 + how many tokens are strictly more probable
    decoded_token: str | None = None


# per position: token id -> its Logprob (the chosen token and the top-k, as vLLM's dicts)
PositionLogprobs = dict[int, Logprob]


def device_logprobs(
    logits: torch.Tensor,  # [rows, vocab], any float dtype
    chosen: torch.Tensor,  # [rows] int64: the token whose logprob and rank each row reports
    k: int,  # top-k width (the batch's largest request; 0: the chosen token only)
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One log_softmax and one topk in fp32, no host reads (capturable). Returns the chosen tokens' logprobs
    [rows] fp32 and ranks [rows] int64, the top-k logprobs [rows, k] fp32 and their ids [rows, k] int64."""
    lp = torch.log_softmax(logits.float(), dim=-1)
    picked = lp.gather(1, chosen[:, None])
    rank = (lp > picked).sum(dim=-1) + 1
    top_vals, top_ids = lp.topk(k, dim=-1) if k > 0 else (lp[:, :0], chosen[:, None][:, :0])
    return picked[:, 0], rank, top_vals, top_ids


def host_rows(
    out: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    chosen: list[int],
    ks: list[int],  # per row: its own k (-1: the row asked for none and gets None)
) -> list[PositionLogprobs | None]:
    """The device results read back (one copy each) as vLLM's per-position dicts, each row cut to its own k."""
    picked, rank, vals, ids = (t[: len(chosen)].tolist() for t in out)
    rows: list[PositionLogprobs | None] = []
    for i, k in enumerate(ks):
        if k < 0:
            rows.append(None)
            continue
        entry = {ids[i][j]: Logprob(vals[i][j], j + 1) for j in range(k)}
        entry[chosen[i]] = Logprob(picked[i], rank[i])  # the chosen token is always there, with its own rank
        rows.append(entry)
    return rows


def cumulative(logprobs: list[PositionLogprobs | None], tokens: list[int]) -> float | None:
    """The sum of the chosen tokens' logprobs (vLLM's cumulative_logprob); None without logprobs."""
    if not logprobs or any(p is None for p in logprobs):
        return None
    return float(sum(p[t].logprob for p, t in zip(logprobs, tokens) if p is not None))


def graph_width(k: int) -> int:
    """The top-k width a captured step computes for a batch whose largest request is k: a few widths, not
    one graph per k (rows cut their own k on the host). -1 (no row asks): no logprobs computed at all."""
    if k < 0:
        return -1
    return next(w for w in (0, 1, 2, 5, 10, MAX_LOGPROBS) if w >= k)
