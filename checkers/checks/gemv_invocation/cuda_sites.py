"""CUDA sources read as text: comments and strings blanked, kernel launch sites, library calls, and
compile-time constant declarations, each with its line (the toolkit never compiles anything)."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import PurePosixPath

from ...linear import Meter, line_of

_OPENER = re.compile(r"//|/\*|[\"']")
_QUOTED = {q: re.compile(rf"(?:\\.|[^{q}\\\n])*+{q}") for q in "\"'"}  # possessive: no backtracking
_NOT_NEWLINE = re.compile(r"[^\n]")
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


def blank_comments(text: str, meter: Meter | None = None) -> str:
    """Comments and string/char literals replaced by spaces; newlines kept so offsets keep their lines.

    One left-to-right pass: each search starts where the last token ended, an unclosed `/*` is searched
    for once (it then stays code, as before), and an unclosed literal marks every later quote of its kind
    on that line unclosed too (both parses agree from the first escaped quote on), so no character is
    scanned twice. `meter` counts the characters the searches pass over."""
    out: list[str] = []
    pos, n = 0, len(text)
    no_close_comment = False
    dead_until = {'"': -1, "'": -1}  # quotes before this offset open no literal
    while pos < n:
        m = _OPENER.search(text, pos)
        if m is None:
            if meter:
                meter.add(pos, n)
            out.append(text[pos:])
            break
        start, tok = m.start(), m.group()
        end = -1
        if tok == "//":
            end = text.find("\n", start)
            end = n if end < 0 else end
        elif tok == "/*" and not no_close_comment:
            end = text.find("*/", start + 2)
            no_close_comment = end < 0
            end = end + 2 if end >= 0 else -1
        elif tok in dead_until and start >= dead_until[tok]:
            q = _QUOTED[tok].match(text, start + 1)
            if q is not None:
                end = q.end()
            else:
                eol = text.find("\n", start)
                dead_until[tok] = n if eol < 0 else eol
                if meter:
                    meter.add(start, dead_until[tok])
        if end < 0:  # not a comment or literal here: the opener's first character is code
            if meter:
                meter.add(pos, start + 1)
            out.append(text[pos : start + 1])
            pos = start + 1
            continue
        if meter:
            meter.add(pos, end)
        out.append(text[pos:start])
        out.append(_NOT_NEWLINE.sub(" ", text[start:end]))
        pos = end
    return "".join(out)


def split_top_level(text: str) -> tuple[str, ...]:
    """Split at commas outside (), [], {} and template <...> brackets that close before the comma."""
    parts, depth, angle, start = [], 0, 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "<" and depth == 0 and text[i + 1 : i + 2] != "<" and text[i - 1 : i] != "<":
            angle += 1
        elif ch == ">" and angle and text[i + 1 : i + 2] != ">" and text[i - 1 : i] != ">":
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


@lru_cache(maxsize=16)
def _close_parens(text: str) -> dict[int, int]:
    """Offset of each `(` -> offset of its matching `)`, from one pass over `text` (an unclosed `(` is
    absent), so finding the end of every call costs one scan in all, not one scan per call."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for m in _PAREN.finditer(text):
        if m.group() == "(":
            stack.append(m.start())
        elif stack:
            pairs[stack.pop()] = m.start()
    return pairs


_PAREN = re.compile(r"[()]")
_LAUNCH_LOOKBACK = 4096  # how far before `<<<` a kernel name and its template arguments are looked for


def launches(code: str, meter: Meter | None = None) -> list[Launch]:
    """Every `<<<...>>>` launch in comment-blanked `code` (each search starts where the last one ended, and
    a kernel name and its template arguments are looked for back to the previous launch at most, so no
    character is read for two launches)."""
    found = []
    pos = 0
    while (start := code.find("<<<", pos)) >= 0:
        close = code.find(">>>", start + 3)
        if close < 0:
            if meter:
                meter.add(pos, len(code))
            break  # no launch closes after this point
        window = code[max(pos, start - _LAUNCH_LOOKBACK) : start]
        if meter:
            meter.add(start - len(window), close + 3)
        head = window.rstrip()
        targs: tuple[str, ...] = ()
        if head.endswith(">"):
            open_ = _matching_open(head, len(head) - 1, "<", ">")
            targs = split_top_level(head[open_ + 1 : -1]) if open_ >= 0 else ()
            head = head[: max(open_, 0)].rstrip()
        name = _TRAILING_NAME.search(head[-256:])
        found.append(
            Launch(
                name.group(1) if name else "?", targs, split_top_level(code[start + 3 : close]), line_of(code, start)
            )
        )
        pos = close + 3
    return found


_TRAILING_NAME = re.compile(r"([A-Za-z_][\w:]*)$")


def library_calls(code: str, pattern: re.Pattern[str], meter: Meter | None = None) -> list[LibraryCall]:
    """Calls whose function name matches `pattern`, with their top-level arguments. A matched call inside
    another's arguments is judged on its own and stands in the outer call's arguments as `name(...)`, so
    each character belongs to one call's arguments (nested calls cost linear work, not quadratic)."""
    found = []
    for call in _matched_calls(code, lambda name: pattern.fullmatch(name) is not None):
        inner = _elided(code, call.open + 1, call.close, call.children, meter)
        found.append(LibraryCall(call.name, split_top_level(inner), line_of(code, call.start)))
    return found


@dataclass
class _Call:
    name: str
    start: int  # offset of the name
    open: int  # offset of `(`
    close: int  # offset of the matching `)`
    children: list[_Call]  # the matched calls directly inside its parentheses, in order


def _matched_calls(code: str, wanted: Callable[[str], bool]) -> list[_Call]:
    """Every closed call of a `wanted` name in `code`, in order, each with the wanted calls directly nested
    in it (one pass with a stack: calls nest or are disjoint, as their parentheses do)."""
    pairs = _close_parens(code)
    calls: list[_Call] = []
    stack: list[_Call] = []
    for m in _CALL.finditer(code):
        if not wanted(m.group(1)):
            continue
        close = pairs.get(m.end() - 1, -1)
        if close < 0:
            continue
        call = _Call(m.group(1), m.start(), m.end() - 1, close, [])
        while stack and stack[-1].close < call.start:
            stack.pop()
        if stack:
            stack[-1].children.append(call)
        stack.append(call)
        calls.append(call)
    return calls


def _elided(code: str, lo: int, hi: int, children: list[_Call], meter: Meter | None = None) -> str:
    """`code[lo:hi]` with each of `children` that lies inside written `name(...)`."""
    pieces, pos = [], lo
    for k in range(bisect.bisect_left(children, lo, key=lambda c: c.start), len(children)):
        child = children[k]
        if child.start >= hi:
            break
        pieces += [code[pos : child.start], f"{child.name}(...)"]
        if meter:
            meter.add(pos, child.open + 1)
        pos = child.close + 1
    pieces.append(code[pos:hi])
    if meter:
        meter.add(pos, hi)
    return "".join(pieces)


def int_literals(expr: str) -> list[str]:
    return [m.group(0) for m in _INT_LITERAL.finditer(expr)]


def names_in(expr: str) -> list[str]:
    """Identifiers read by an expression (last component of a qualified name; members after . or -> skipped)."""
    return [m.group(1).split("::")[-1] for m in _NAME_IN_EXPR.finditer(expr.replace(" ", ""))]


def constant_declarations(code: str, name: str) -> list[int]:
    """Lines where `name` is declared as a compile-time constant: `constexpr ... name =|{` or `#define name`."""
    return list(_declarations(code).get(name, ()))


_CONSTEXPR = re.compile(r"\bconstexpr\b")
_DECL_END = re.compile(r"[;=(){}]")
_DECLARED_NAME = re.compile(r"([A-Za-z_]\w*)\s*$")
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)", re.M)


@lru_cache(maxsize=16)
def _declarations(code: str) -> dict[str, tuple[int, ...]]:
    """Every constant declared in `code` -> its lines, from one pass: each `constexpr` is joined to the
    next of `;=(){}` (found once for all the `constexpr`s before it), and it declares the identifier just
    before that character when the character is `=` or `{`."""
    found: dict[str, list[int]] = {}
    end = None
    for m in _CONSTEXPR.finditer(code):
        if end is None or end.start() < m.end():
            end = _DECL_END.search(code, m.end())
            if end is None:
                break
        if end.group() in "={":
            span = code[m.end() : end.start()]
            if (name := _DECLARED_NAME.search(span[-512:])) is not None:
                found.setdefault(name.group(1), []).append(line_of(code, m.start()))
    for m in _DEFINE.finditer(code):
        found.setdefault(m.group(1), []).append(line_of(code, m.start()))
    return {k: tuple(sorted(v)) for k, v in found.items()}


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


def call_spans(code: str, names: frozenset[str], meter: Meter | None = None) -> list[CallSpans]:
    """Calls of the functions in `names` in comment-blanked `code`, each argument with its offsets (so the
    raw text around an argument, comments included, can be read back at the same offsets). The split skips
    over nested parentheses, and a call of `names` inside another's arguments is judged on its own and
    reads `name(...)` there: each character is read for one call (linear, however deep the nesting)."""
    pairs = _close_parens(code)
    found = []
    for call in _matched_calls(code, names.__contains__):
        args, depth, start, i = [], 0, call.open + 1, call.open + 1
        while i <= call.close:
            ch = code[i]
            if meter:
                meter.steps += 1
                meter.scanned += 1
            if ch == "(" and i < call.close:
                i = pairs.get(i, i) + 1  # balanced inside a closed call: its `)` is known
                continue
            if ch in "[{":
                depth += 1
            elif ch in "]}":
                depth -= 1
            elif (ch == "," and depth == 0) or i == call.close:
                lo, hi = start, i
                while lo < hi and code[lo] in _WHITESPACE:
                    lo += 1
                while hi > lo and code[hi - 1] in _WHITESPACE:
                    hi -= 1
                args.append(Arg(_elided(code, lo, hi, call.children), lo, hi))
                start = i + 1
            i += 1
        found.append(CallSpans(call.name, tuple(a for a in args if a.text or len(args) > 1), call.start))
    return found


_WHITESPACE = frozenset(" \t\n\r\f\v")


class LineIndex:
    """Line numbers of offsets in one text, by binary search over its newlines (linear to build)."""

    def __init__(self, text: str):
        self._newlines = [i for i, ch in enumerate(text) if ch == "\n"]

    def line(self, offset: int) -> int:
        return bisect.bisect_right(self._newlines, offset - 1) + 1
