"""The request workload that bench throughput and bench serving share: the model and the random prompts."""

from __future__ import annotations

import random
from pathlib import Path

from engine.llm import TINY_MODEL
from lab.bench.step_workload import QWEN3_0_6B, save_random_model


def model_for(tmp: Path, smoke: bool) -> Path:
    """The embedded tiny model for a smoke run, else random weights of Qwen3-0.6B's shape saved under `tmp`."""
    if smoke:
        return TINY_MODEL
    return save_random_model(tmp, QWEN3_0_6B)


def workload(n: int, min_len: int, max_len: int, vocab: int, seed: int) -> tuple[list[list[int]], list[int]]:
    """`n` prompts of random ids and their output lengths, each uniform in [min_len, max_len]: the same for a seed."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(vocab) for _ in range(rng.randint(min_len, max_len))] for _ in range(n)]
    return prompts, [rng.randint(min_len, max_len) for _ in range(n)]
