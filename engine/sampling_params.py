"""Per-request sampling settings with vLLM's meanings, checked once when a request is added."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SamplingParams:
    """How one request is decoded.

    temperature: 0 is greedy (exactly the argmax), > 0 samples softmax(logits / T).
    top_p: the smallest most-probable set whose mass reaches p, in (0, 1]; 1 keeps every token.
    top_k: the k most probable tokens; -1 (or 0) keeps every token.
    max_tokens: generated tokens at most (the prompt not counted); the request ends with "length".
    seed: the request's own random stream: the same seed gives the same tokens whatever else runs
        beside it; None draws one from the engine's generator (seeded by `LLM(seed=...)`).
    stop_token_ids: generating one of these ends the request with "stop" (the token is kept).
    ignore_eos: keep going past the model's EOS tokens (from its generation config).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 16
    seed: int | None = None
    stop_token_ids: Sequence[int] = field(default=())
    ignore_eos: bool = False

    def check(self, request: int) -> None:
        """Raise a ValueError naming the request and the field for a setting outside its range."""

        def bad(name: str, why: str) -> ValueError:
            return ValueError(f"request {request}: SamplingParams.{name}={getattr(self, name)!r} {why}")

        if not isinstance(self.temperature, (int, float)) or not self.temperature >= 0:
            raise bad("temperature", "must be >= 0 (0 is greedy)")
        if not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            raise bad("top_p", "must be in (0, 1]")
        if not isinstance(self.top_k, int) or self.top_k < -1:
            raise bad("top_k", "must be -1 (off), 0 (off) or a positive count")
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise bad("max_tokens", "must be at least 1")
        if self.seed is not None and not isinstance(self.seed, int):
            raise bad("seed", "must be an int or None")
        if any(not isinstance(t, int) for t in self.stop_token_ids):
            raise bad("stop_token_ids", "must be token ids (ints)")
