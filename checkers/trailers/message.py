"""A commit message as the contract reads it: git's trailer block, a GitHub squash's earlier block, and
the paragraphs before the trailers."""

from __future__ import annotations

import re
from typing import NamedTuple

from ..trailers import parser
from ..trailers.parser import Mode, Trailer, TrailerBlock

SEPARATOR = re.compile(r"-{3,}[ \t\r]*")  # a rule of hyphens alone on its line (GitHub's squash writes nine)
FORGE_KEYS = frozenset({"co-authored-by"})  # what a forge appends in paragraphs of its own


class Message(NamedTuple):
    """A message as the contract sees it: git's trailer block, joined with the block above it when git's
    block is only forge paragraphs (`Co-authored-by:` lines a web merge or squash appends)."""

    text: str
    block: TrailerBlock
    trailers: tuple[Trailer, ...]
    body_end: int  # where the paragraphs before the trailer block end


def read_message(text: str, mode: Mode) -> Message:
    block = parser.parse(text, mode) if mode == "hook" else parser.commit_trailers(text)
    text = block.message
    trailers = block.trailers
    body_end = block.start
    # "...\n\nRow: X\n\n---------\n\nCo-authored-by: A\n\nCo-authored-by: B": git sees only the last
    # paragraph. Step back over forge paragraphs and separators to the block above, and join them to it.
    if not (block.found and _forge_only(block)):
        # tuple.__new__: Message(...) without its Python-level __new__, for once per commit of a range
        return tuple.__new__(Message, (text, block, trailers, body_end))
    forge: list[Trailer] = list(trailers)
    cut = block.start
    while True:
        para = _last_paragraph(text, cut)
        if para is None:
            break
        start, body = para
        if SEPARATOR.fullmatch(body.rstrip("\n")):
            cut = start
            continue
        before = parser.parse(text[: start + len(body)], mode, final_newline=False)
        if not before.found or before.start != start:
            break
        if _forge_only(before):
            forge = list(before.trailers) + forge
            cut = start
            continue
        return Message(text, block, before.trailers + tuple(forge), before.start)
    return Message(text, block, trailers, body_end)


def _forge_only(block: TrailerBlock) -> bool:
    """Whether a block is all forge trailers (and nothing else: no prose line, no other key). A loop, not
    all(): this runs for every commit of a range, and most blocks fail on their first key."""
    if not block.trailers or len(block.trailers) != len(block.lines):
        return False
    for t in block.trailers:
        if t.key.lower() not in FORGE_KEYS:
            return False
    return True


def _last_paragraph(text: str, end: int) -> tuple[int, str] | None:
    """(offset, text) of the last paragraph that ends before `end`, blank lines between skipped; None when
    only the title paragraph is left (it is never trailers) or nothing is."""
    lines = text[:end].split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    i = len(lines)
    while i and not lines[i - 1].strip(" \t\r"):
        i -= 1
    j = i
    while j and lines[j - 1].strip(" \t\r"):
        j -= 1
    if i == 0 or j == 0:
        return None
    start = len("\n".join(lines[:j])) + 1
    return start, "\n".join(lines[j:i]) + "\n"


def paragraphs(text: str) -> list[tuple[int, str, str]]:
    """(first line number, first line, whole paragraph) of each paragraph, comment lines dropped (the first
    line without its trailing blanks, the whole paragraph as written, CRs dropped); a separator paragraph (a rule of three or more hyphens) is stepped
    over, as a forge's squash writes one."""
    out: list[tuple[int, str, list[str]]] = []
    start = True
    for n, line in enumerate(text.split("\n"), 1):
        if line.startswith("#"):
            continue
        if not line.strip(" \t\r"):
            start = True
            continue
        exact = line.rstrip("\r")
        if start:
            out.append((n, line.rstrip(" \t\r"), [exact]))
        else:
            out[-1][2].append(exact)
        start = False
    return [
        (n, first, "\n".join(lines)) for n, first, lines in out if not (len(lines) == 1 and SEPARATOR.fullmatch(first))
    ]
