"""A request as its caller sees it: its samples' text (stop strings cut), logprobs, metrics and outputs.

The scheduler runs Sequences (one per sample, `n` of them per request); a Request joins them back into
vLLM's RequestOutput and keeps what only the caller needs: the detokenized text, where the last streamed
delta ended, the prompt logprobs, and the times of arrival, first token and finish.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from engine.logprobs import PositionLogprobs, cumulative
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence, Status


@dataclass
class RequestMetrics:
    arrival_time: float  # time.time() when the request was added
    first_token_time: float | None = None  # when its first generated token was read back
    finished_time: float | None = None

    @property
    def ttft(self) -> float | None:
        """Time to first token, seconds."""
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    def tpot(self, num_tokens: int) -> float | None:
        """Time per output token after the first, seconds (None with fewer than two tokens or unfinished)."""
        if self.finished_time is None or self.first_token_time is None or num_tokens < 2:
            return None
        return (self.finished_time - self.first_token_time) / (num_tokens - 1)


@dataclass
class CompletionOutput:
    index: int  # the sample's index within its request (0..n-1)
    text: str | None  # decoded (None without a tokenizer); a delta when streamed
    token_ids: list[int]  # generated tokens (a delta when streamed)
    cumulative_logprob: float | None
    logprobs: list[PositionLogprobs | None] | None  # per token in token_ids, with SamplingParams.logprobs
    finish_reason: str | None  # "stop", "length", "abort"; None while running
    stop_reason: int | str | None = None  # the stop token or stop string that ended it


@dataclass
class RequestOutput:
    """vLLM's RequestOutput; the fields before `outputs` repeat sample 0's, as this engine always gave them."""

    index: int  # the request's place in the prompt list (generate) or its id (add_request)
    prompt_token_ids: list[int]
    token_ids: list[int]  # generated tokens; a stop token or EOS that ended the request is included
    text: str | None  # the generated tokens decoded (special tokens skipped); None without a tokenizer
    finish_reason: str | None  # "stop" (EOS, a stop token or string), "length", "abort"; None while running
    num_cached_tokens: int  # prompt tokens the prefix cache supplied at the last admission
    request_id: str = ""
    outputs: list[CompletionOutput] = field(default_factory=list)
    prompt_logprobs: list[PositionLogprobs | None] | None = None
    finished: bool = True
    metrics: RequestMetrics | None = None

    @property
    def cumulative_logprob(self) -> float | None:
        return self.outputs[0].cumulative_logprob if self.outputs else None

    @property
    def logprobs(self) -> list[PositionLogprobs | None] | None:
        return self.outputs[0].logprobs if self.outputs else None


class Request:
    def __init__(
        self, request_id: str, index: int, params: SamplingParams, owner: object | None, stream: bool = False
    ) -> None:
        self.request_id, self.index, self.params, self.owner = request_id, index, params, owner
        self.stream = stream  # its caller takes increments: its text is decoded every step, not only at the end
        self.seqs: list[Sequence] = []
        self.metrics = RequestMetrics(time.time())
        self.prompt_logprobs: dict[int, PositionLogprobs] = {}
        n = params.n
        self.text = [""] * n  # the text so far (cut at a stop string)
        self.sent_tokens = [0] * n  # what a stream has handed out
        self.sent_text = [0] * n
        self.stop_reason: list[int | str | None] = [None] * n
        self.aborted = False  # ended by LLM.abort or an engine error

    @property
    def finished(self) -> bool:
        return all(s.status is Status.FINISHED for s in self.seqs)

    def update_text(self, i: int, tokenizer: Any) -> str | None:
        """Decode sample i's output; returns the stop string it now contains (the text cut at it), or None."""
        seq, p = self.seqs[i], self.params
        if tokenizer is None:
            return None
        ids = [t for t in seq.output_ids if t >= 0]  # an aborted step's placeholder is no token
        text = tokenizer.decode(ids, skip_special_tokens=p.skip_special_tokens)
        stops = p.stop_strings
        if stops and len(ids) >= p.min_tokens:
            start = max(0, len(self.text[i]) - max(map(len, stops)) + 1)
            hits = [(text.find(s, start), s) for s in stops]
            hits = [(at, s) for at, s in hits if at >= 0]
            if hits:
                at, s = min(hits)
                self.text[i] = text[: at + len(s)] if p.include_stop_str_in_output else text[:at]
                return s
        self.text[i] = text
        return None

    def output(self, tokenizer: Any, num_cached: int, delta: bool = False) -> RequestOutput:
        """The request now: whole outputs, or with delta=True only what no earlier delta output handed out
        (text held back while it could still be the start of a stop string or an unfinished character)."""
        outs = []
        want_lp = self.params.logprobs is not None
        for i, seq in enumerate(self.seqs):
            done = seq.status is Status.FINISHED
            tokens, lps = seq.output_ids, seq.logprobs if want_lp else None
            text = self.text[i] if tokenizer is not None else None
            cum = cumulative(seq.logprobs, tokens) if want_lp else None
            if delta:
                a, b = self.sent_tokens[i], len(tokens)
                tokens, lps = tokens[a:b], (lps[a:b] if lps is not None else None)
                self.sent_tokens[i] = b
                if text is not None:
                    end = len(text) if done else self._safe_end(text)
                    text, self.sent_text[i] = text[self.sent_text[i] : end], max(end, self.sent_text[i])
            # a sample that ended before an abort keeps its reason; the abort ended the others ("abort")
            reason = seq.finish_reason if done else None
            outs.append(CompletionOutput(i, text, tokens, cum, lps, reason, self.stop_reason[i] if done else None))
        first = self.seqs[0]
        prompt_lps = None
        if self.params.prompt_logprobs is not None:
            prompt_lps = [None] + [self.prompt_logprobs.get(j) for j in range(1, first.num_prompt_tokens)]
        return RequestOutput(
            self.index,
            first.token_ids[: first.num_prompt_tokens],
            outs[0].token_ids,
            outs[0].text,
            outs[0].finish_reason,
            num_cached,
            self.request_id,
            outs,
            prompt_lps,
            self.finished,
            self.metrics,
        )

    def _safe_end(self, text: str) -> int:
        """How much of a running sample's text a stream may hand out: not a trailing U+FFFD (a character
        whose bytes are not all generated yet), nor a tail that could begin a stop string."""
        end = len(text.rstrip("\ufffd"))
        for s in self.params.stop_strings:
            for k in range(min(len(s) - 1, end), 0, -1):
                if text[end - k : end] == s[:k]:
                    end -= k
                    break
        return end
