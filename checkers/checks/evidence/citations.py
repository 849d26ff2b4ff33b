"""Where a document attributes numbers to ledger records: its blocks (a paragraph, a list item, a table row),
the citations in each (a marker beside a number, or a record's file name), and whether the block presents a
number as a headline or as what the defaults give."""

from __future__ import annotations

import re
from typing import NamedTuple

from ...safe_regex import SafePattern

# A number as documents print it: 17,873 / 9.57 / 0.5; not the digits inside a word, a sha or a date.
NUMBER = re.compile(r"(?<![\w.\-/])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?!\d|[.,]\d)")
BOLD = re.compile(r"\*\*([^*\n]+)\*\*")
# A number worth a headline: a decimal, a thousands group, or two digits and more (not `Window 2`, `Qwen3`).
_HEADLINE_NUMBER = re.compile(r"(?<![\w.\-/])(?:\d{1,3}(?:,\d{3})+|\d+\.\d+|\d{2,})(?![\w-])|\d(?:x|%)")
FILE_NAME = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*(?:\{[A-Za-z0-9._,-]+\}[A-Za-z0-9._-]*)?)\.json\b")
_BRACES = re.compile(r"\{([A-Za-z0-9._,-]+)\}")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_ITEM = re.compile(r"^\s{0,3}(?:[-*+]|\d+[.)])\s+")


class Citation(NamedTuple):
    name: str  # the record's file name without .json
    line: int
    label: str | None  # a dated citation's label (`2026-12-01 17944c8 dirty`); None: a current one
    number: str | None  # the printed number the marker stands beside; None: a file-name citation or no number
    marker: bool  # written as a marker (True) or as the record's file name (False)


class Block(NamedTuple):
    line: int  # first line
    text: str
    heading: str  # the nearest heading above
    item: bool  # a list item
    citations: list[Citation]
    headline: bool  # a bold number, or an item of a headline section
    defaults: bool  # a headline that presents its numbers as what the defaults give


def blocks(text: str) -> list[tuple[int, str, str, bool]]:
    """(first line, text, heading, is a list item) per paragraph, list item and table row; fenced code skipped."""
    out: list[tuple[int, str, str, bool]] = []
    cur: list[str] = []
    start, heading, item, fence = 0, "", False, False

    def flush() -> None:
        nonlocal cur
        if cur:
            out.append((start, "\n".join(cur), heading, item))
        cur = []

    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            flush()
            fence = not fence
            continue
        if fence:
            continue
        if not line.strip():
            flush()
            continue
        if m := _HEADING.match(line):
            flush()
            heading = m.group(2)
            continue
        if line.lstrip().startswith("|") or _ITEM.match(line):
            flush()
            start, item = n, bool(_ITEM.match(line))
            cur = [line]
            if line.lstrip().startswith("|"):
                flush()
            continue
        if not cur:
            start, item = n, False
        cur.append(line)
    flush()
    return out


def scan(
    text: str, marker: SafePattern, file_names: bool, headline_sections: list[str], defaults_words: list[str]
) -> list[Block]:
    """Every block of `text` with its citations and what it presents."""
    words = (
        re.compile(r"\b(?:" + "|".join(re.escape(w) for w in defaults_words) + r")\b", re.I) if defaults_words else None
    )
    out = []
    for start, body, heading, item in blocks(text):
        cites = _markers(body, start, marker)
        masked = _mask_markers(body, marker)
        if file_names:
            cites += [
                Citation(name, start + masked.count("\n", 0, m.start()), None, None, False)
                for m in FILE_NAME.finditer(masked)
                for name in _expand(m.group(1))
            ]
        bold = any(_HEADLINE_NUMBER.search(m.group(1)) for m in BOLD.finditer(body))
        headline = bold or (item and heading in headline_sections)
        defaults = bool(headline and words and words.search(masked))
        out.append(Block(start, body, heading, item, cites, headline, defaults))
    return out


def _markers(body: str, start: int, marker: SafePattern) -> list[Citation]:
    cites, pos, prev_end = [], 0, 0
    while pos <= len(body) and (m := marker.search(body[pos:])):
        a, b = pos + m.start(), pos + m.end()
        groups = m.groupdict()
        numbers = NUMBER.findall(_plain(body[prev_end:a]))
        label = (groups.get("label") or "").strip() or None
        line = start + body.count("\n", 0, a)
        cites.append(Citation(groups["name"], line, label, numbers[-1] if numbers else None, True))
        pos = prev_end = max(b, pos + 1)
    return cites


def _mask_markers(body: str, marker: SafePattern) -> str:
    """The body with each marker blanked (newlines kept), so a marker's name is not read twice."""
    pos, parts = 0, []
    while pos <= len(body) and (m := marker.search(body[pos:])):
        a, b = pos + m.start(), pos + max(m.end(), 1)
        parts += [body[pos:a], re.sub(r"[^\n]", " ", body[a:b])]
        pos = b
    return "".join(parts) + body[pos:]


def _plain(text: str) -> str:
    """Markdown emphasis and code ticks dropped, so `**17,873**` reads as 17,873."""
    return text.replace("*", "").replace("`", "")


def _expand(name: str) -> list[str]:
    """`a-{x,y}` names two records, as a shell would expand it."""
    m = _BRACES.search(name)
    if not m:
        return [name]
    return [e for alt in m.group(1).split(",") for e in _expand(name[: m.start()] + alt + name[m.end() :])]
