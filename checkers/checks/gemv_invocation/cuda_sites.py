"""CUDA sources read as text: comments and strings blanked, kernel launch sites, library calls, and
compile-time constant declarations, each with its line (the toolkit never compiles anything)."""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import PurePosixPath

_COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
_IDENT = re.compile(r"[A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)*")
_CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_INT_LITERAL = re.compile(r"(?<![\w.])(0[xX][0-9a-fA-F]+|\d+)[uUlL]*(?![\w.])")
_NAME_IN_EXPR = re.compile(r"(?<![\w.])(?<!->)([A-Za-z_]\w*(?:::[A-Za-z_]\w*)*)")


@dataclass(frozen=True)
class Launch:
    """`kernel<targs><<<config>>>` at `line`; config holds grid, block, shared memory and stream."""

    kernel: str
    template_args: tuple[str, ...]
    config: tuple[str, ...]
    line: int


@dataclass(frozen=True)
class LibraryCall:
    name: str
    args: tuple[str, ...]
    line: int


def blank_comments(text: str) -> str:
    """Comments and string/char literals replaced by spaces; newlines kept so offsets keep their lines."""
    return _COMMENT_OR_STRING.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def split_top_level(text: str) -> tuple[str, ...]:
    """Split at commas outside (), [], {} and template <...> brackets that close before the comma."""
    parts, depth, angle, start = [], 0, 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "<" and depth == 0 and text[i + 1:i + 2] != "<" and text[i - 1:i] != "<":
            angle += 1
        elif ch == ">" and angle and text[i + 1:i + 2] != ">" and text[i - 1:i] != ">":
            angle -= 1
        elif ch == "," and depth == 0 and angle == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    return (*parts, tail) if tail or parts else ()


def _matching_open(text: str, close: int, open_ch: str, close_ch: str) -> int:
    depth = 0
    for i in range(close, -1, -1):
        if text[i] == close_ch:
            depth += 1
        elif text[i] == open_ch:
            depth -= 1
            if depth == 0:
                return i
    return -1


def _matching_close(text: str, open_: int) -> int:
    depth = 0
    for i in range(open_, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    return -1


def launches(code: str) -> list[Launch]:
    """Every `<<<...>>>` launch in comment-blanked `code`."""
    found = []
    for m in re.finditer(r"<<<(.*?)>>>", code, re.S):
        head = code[:m.start()].rstrip()
        targs: tuple[str, ...] = ()
        if head.endswith(">"):
            open_ = _matching_open(head, len(head) - 1, "<", ">")
            targs = split_top_level(head[open_ + 1:-1]) if open_ >= 0 else ()
            head = head[:max(open_, 0)].rstrip()
        name = re.search(r"([A-Za-z_][\w:]*)$", head)
        found.append(Launch(name.group(1) if name else "?", targs, split_top_level(m.group(1)),
                            line_of(code, m.start())))
    return found


def library_calls(code: str, pattern: re.Pattern[str]) -> list[LibraryCall]:
    """Calls whose function name matches `pattern`, with their top-level arguments."""
    found = []
    for m in _CALL.finditer(code):
        if not pattern.fullmatch(m.group(1)):
            continue
        close = _matching_close(code, m.end() - 1)
        if close < 0:
            continue
        found.append(LibraryCall(m.group(1), split_top_level(code[m.end():close]), line_of(code, m.start())))
    return found


def int_literals(expr: str) -> list[str]:
    return [m.group(0) for m in _INT_LITERAL.finditer(expr)]


def names_in(expr: str) -> list[str]:
    """Identifiers read by an expression (last component of a qualified name; members after . or -> skipped)."""
    return [m.group(1).split("::")[-1] for m in _NAME_IN_EXPR.finditer(expr.replace(" ", ""))]


def constant_declarations(code: str, name: str) -> list[int]:
    """Lines where `name` is declared as a compile-time constant: `constexpr ... name =|{` or `#define name`."""
    if name not in code:
        return []
    return [line_of(code, m.start()) for m in _declaration(name).finditer(code)]


@lru_cache(maxsize=4096)
def _declaration(name: str) -> re.Pattern[str]:
    n = re.escape(name)
    return re.compile(rf"\bconstexpr\b[^;=(){{}}]*?\b{n}\s*[={{]|^\s*#\s*define\s+{n}\b", re.M)


def local_includes(code: str, path: str) -> list[str]:
    """Paths of `#include "x"` relative to the including file's directory (repo-relative, normalised)."""
    base = PurePosixPath(path).parent
    out = []
    for inc in _INCLUDE.findall(code):
        parts: list[str] = []
        for part in (base / inc).parts:
            if part == "..":
                if parts:
                    parts.pop()
            elif part != ".":
                parts.append(part)
        out.append("/".join(parts))
    return out


def translation_unit(path: str, codes: dict[str, str]) -> list[str]:
    """`path` and every local header it includes, transitively, that is among `codes` (in include order)."""
    seen: list[str] = []
    stack = [path]
    while stack:
        p = stack.pop(0)
        if p in seen or p not in codes:
            continue
        seen.append(p)
        stack.extend(local_includes(codes[p], p))
    return seen


@dataclass(frozen=True)
class Arg:
    """One top-level argument of a call: its text in the comment-blanked code and its offsets."""

    text: str
    start: int
    end: int


@dataclass(frozen=True)
class CallSpans:
    name: str
    args: tuple[Arg, ...]
    start: int  # offset of the function name


def call_spans(code: str, names: frozenset[str]) -> list[CallSpans]:
    """Calls of the functions in `names` in comment-blanked `code`, each argument with its offsets (so the
    raw text around an argument, comments included, can be read back at the same offsets)."""
    found = []
    for m in _CALL.finditer(code):
        if m.group(1) not in names:
            continue
        close = _matching_close(code, m.end() - 1)
        if close < 0:
            continue
        args, depth, start = [], 0, m.end()
        for i in range(m.end(), close + 1):
            ch = code[i]
            if ch in "([{":
                depth += 1
            elif ch in ")]}" and i < close:
                depth -= 1
            elif (ch == "," and depth == 0) or i == close:
                text = code[start:i]
                lead = len(text) - len(text.lstrip())
                args.append(Arg(text.strip(), start + lead, start + lead + len(text.strip())))
                start = i + 1
        found.append(CallSpans(m.group(1), tuple(a for a in args if a.text or len(args) > 1), m.start()))
    return found


class LineIndex:
    """Line numbers of offsets in one text, by binary search over its newlines (linear to build)."""

    def __init__(self, text: str):
        self._newlines = [i for i, ch in enumerate(text) if ch == "\n"]

    def line(self, offset: int) -> int:
        return bisect.bisect_right(self._newlines, offset - 1) + 1
