"""Per-request sampling settings with vLLM's meanings, checked once when a request is added."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

GREEDY_BELOW = 1e-5  # vLLM's _SAMPLING_EPS: a temperature below it is greedy (logits / T would overflow)
MAX_LOGPROBS = 20  # vLLM's default max_logprobs


@dataclass(frozen=True)
class SamplingParams:
    """How one request is decoded.

    n: samples per prompt; sample i > 0 draws from a seed derived from the request's (see `sample_seed`).
    temperature: below 1e-5 is greedy (exactly the argmax), else samples softmax(logits / T).
    top_p: the smallest most-probable set whose mass reaches p, in (0, 1]; 1 keeps every token.
    top_k: the k most probable tokens; -1 (or 0) keeps every token.
    min_p: drop tokens less probable than min_p times the most probable one (after the temperature); 0 is off.
    presence_penalty, frequency_penalty: subtracted from the logit of each token the output holds, once
        (presence) or per occurrence (frequency); in [-2, 2]. repetition_penalty: a token in the prompt or
        the output has its logit divided by it (positive logits) or multiplied by it; > 0, 1 is off.
    max_tokens: generated tokens at most (the prompt not counted); the request ends with "length".
    min_tokens: no stop token, EOS or stop string ends the request before it has this many tokens.
    seed: the request's own random stream: the same seed gives the same tokens whatever else runs
        beside it; None draws one from the engine's generator (seeded by `LLM(seed=...)`).
    stop: strings that end the request ("stop"); the text is cut before the stop string unless
        include_stop_str_in_output.
    stop_token_ids: generating one of these ends the request with "stop" (the token is kept).
    ignore_eos: keep going past the model's EOS tokens (from its generation config).
    logprobs: per generated token, the chosen token's logprob and rank and the `logprobs` most probable
        tokens (raw logprobs: the model's distribution before penalties, temperature, min_p, top-k, top-p).
    prompt_logprobs: the same for every prompt token after the first.
    skip_special_tokens: leave special tokens out of the text.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    max_tokens: int = 16
    min_tokens: int = 0
    seed: int | None = None
    stop: str | Sequence[str] | None = None
    stop_token_ids: Sequence[int] = field(default=())
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    skip_special_tokens: bool = True

    @property
    def stop_strings(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW

    @property
    def effective_temperature(self) -> float:
        """The temperature the sampler sees: 0 (greedy) below 1e-5."""
        return 0.0 if self.greedy else float(self.temperature)

    def check(self, request: int) -> None:
        """Raise a ValueError naming the request and the field for a setting outside its range."""

        def bad(name: str, why: str) -> ValueError:
            return ValueError(f"request {request}: SamplingParams.{name}={getattr(self, name)!r} {why}")

        def number(value: object) -> bool:
            return isinstance(value, (int, float)) and not isinstance(value, bool)

        if not isinstance(self.n, int) or self.n < 1:
            raise bad("n", "must be at least 1")
        if not number(self.temperature) or not self.temperature >= 0:
            raise bad("temperature", "must be >= 0 (below 1e-5 is greedy)")
        if not number(self.top_p) or not 0 < self.top_p <= 1:
            raise bad("top_p", "must be in (0, 1]")
        if not isinstance(self.top_k, int) or self.top_k < -1:
            raise bad("top_k", "must be -1 (off), 0 (off) or a positive count")
        if not number(self.min_p) or not 0 <= self.min_p <= 1:
            raise bad("min_p", "must be in [0, 1]")
        for name in ("presence_penalty", "frequency_penalty"):
            if not number(getattr(self, name)) or not -2 <= getattr(self, name) <= 2:
                raise bad(name, "must be in [-2, 2]")
        if not number(self.repetition_penalty) or not self.repetition_penalty > 0:
            raise bad("repetition_penalty", "must be > 0 (1 is off)")
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise bad("max_tokens", "must be at least 1")
        if not isinstance(self.min_tokens, int) or not 0 <= self.min_tokens <= self.max_tokens:
            raise bad("min_tokens", f"must be in [0, max_tokens={self.max_tokens}]")
        if self.seed is not None and not isinstance(self.seed, int):
            raise bad("seed", "must be an int or None")
        if any(not isinstance(s, str) or not s for s in self.stop_strings):
            raise bad("stop", "must be a non-empty string or a list of them")
        if any(not isinstance(t, int) for t in self.stop_token_ids):
            raise bad("stop_token_ids", "must be token ids (ints)")
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or not 0 <= value <= MAX_LOGPROBS):
                raise bad(name, f"must be None or in [0, {MAX_LOGPROBS}]")


def sample_seed(seed: int, index: int) -> int:
    """Sample `index` of an n > 1 request draws from this seed: the request's own for sample 0, so n=1 and
    sample 0 agree, and a 64-bit mix of (seed, index) for the others, so samples differ but each is
    reproducible from the request's seed alone."""
    if index == 0:
        return seed
    x = (seed * 0x9E3779B97F4A7C15 + index * 0xBF58476D1CE4E5B9) % (1 << 64)
    x ^= x >> 31
    x = (x * 0x94D049BB133111EB) % (1 << 64)
    return x ^ (x >> 29)
