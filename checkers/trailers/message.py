"""A commit message as the contract reads it: git's trailer block, a GitHub squash's earlier block, and
the paragraphs before the trailers."""
from __future__ import annotations

import re
from typing import NamedTuple

from checkers.trailers import parser
from checkers.trailers.parser import Mode, Trailer, TrailerBlock

SQUASH_SEPARATOR = re.compile(r"-{9,}[ \t\r]*")  # the line GitHub puts before a squash's co-authors


class Message(NamedTuple):
    """A message as the contract sees it: git's trailer block, plus a GitHub squash's earlier block."""

    text: str
    block: TrailerBlock
    trailers: tuple[Trailer, ...]
    body_end: int  # where the paragraphs before the trailer block end


def read_message(text: str, mode: Mode) -> Message:
    block = parser.parse(text, mode) if mode == "hook" else parser.commit_trailers(text)
    text = block.message
    trailers = block.trailers
    body_end = block.start
    # GitHub squash: "...\n\nRow: X\n\n---------\n\nCo-authored-by: ...". Git sees only the last block;
    # the contract also reads the block that ends right before the separator line.
    if "\n---------" not in text:
        return Message(text, block, trailers, body_end)
    head = text[:block.start].rstrip(" \t\r\n")
    cut = head.rfind("\n") + 1
    if block.found and cut > 0 and SQUASH_SEPARATOR.fullmatch(head[cut:]):
        before = parser.parse(text[:cut], mode)
        trailers = before.trailers + trailers
        body_end = before.start
    return Message(text, block, trailers, body_end)


def paragraphs(text: str) -> list[tuple[int, str]]:
    """(first line number, first line) of each paragraph, comment lines dropped."""
    out = []
    start = True
    for n, line in enumerate(text.split("\n"), 1):
        if line.startswith("#"):
            continue
        if not line.strip(" \t\r"):
            start = True
            continue
        if start:
            out.append((n, line.rstrip(" \t\r")))
        start = False
    return out
