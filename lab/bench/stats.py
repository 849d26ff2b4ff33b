"""Summaries and verdicts over repeated timings: medians with min-max bands, per-pair ratios, and the
A/B rule (a win needs non-overlapping bands and no reversed pair)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Band:
    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, samples: list[float]) -> Band:
        if not samples:
            raise ValueError("no samples: every arm needs at least one kept repetition")
        return cls(statistics.median(samples), min(samples), max(samples), len(samples))

    def overlaps(self, other: Band) -> bool:
        return self.low <= other.high and other.low <= self.high


def drop_warmup(samples: list[float]) -> list[float]:
    """Repetition 0 carries module load, autotuning and cold caches: it is never kept."""
    if len(samples) < 2:
        raise ValueError(f"need at least 2 repetitions to drop the first, got {len(samples)}")
    return samples[1:]


@dataclass(frozen=True)
class Verdict:
    base: Band
    test: Band
    ratios: list[float]  # per interleaved pair: base time / test time (>1: test is faster)
    label: str  # "win", "loss" or "no difference"

    @property
    def median_ratio(self) -> float:
        return statistics.median(self.ratios)


def ab_verdict(base: list[float], test: list[float]) -> Verdict:
    """Compare kept repetitions of two interleaved arms (pair i ran back to back).

    A win (or loss) needs the min-max bands not to overlap AND every pair to agree in direction;
    anything else is "no difference", however far apart the medians are."""
    if len(base) != len(test):
        raise ValueError(f"arms have {len(base)} and {len(test)} repetitions; pairs need equal counts")
    ratios = [b / t for b, t in zip(base, test)]
    bb, tb = Band.of(base), Band.of(test)
    if not bb.overlaps(tb) and all(r > 1 for r in ratios):
        label = "win"
    elif not bb.overlaps(tb) and all(r < 1 for r in ratios):
        label = "loss"
    else:
        label = "no difference"
    return Verdict(bb, tb, ratios, label)
