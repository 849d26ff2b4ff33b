"""Linear-time scanning helpers shared by the source scanners: a meter that proves a scan never passes
over the same text twice, and line numbers from one newline index per text (not one count per lookup)."""

from __future__ import annotations

import bisect
from functools import lru_cache


class Meter:
    """Counts a scanner's steps and the characters its searches pass over. A linear scanner keeps
    `scanned` within a small multiple of the input length whatever the input."""

    def __init__(self) -> None:
        self.steps = 0
        self.scanned = 0

    def add(self, start: int, end: int) -> None:
        self.steps += 1
        self.scanned += max(0, end - start)


def line_of(text: str, offset: int) -> int:
    """The 1-based line of `offset` in `text`: a binary search in the text's newline index."""
    return bisect.bisect_right(newlines(text), offset - 1) + 1


@lru_cache(maxsize=16)
def newlines(text: str) -> tuple[int, ...]:
    """Offsets of every newline of `text`, built once per text (a str caches its hash, so a repeated
    lookup for the same text costs a dictionary probe)."""
    out, i = [], text.find("\n")
    while i >= 0:
        out.append(i)
        i = text.find("\n", i + 1)
    return tuple(out)
