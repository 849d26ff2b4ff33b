"""Root-anchored globs matched in time linear in the path, whatever the pattern: a glob is compiled to a
small automaton (no backtracking), run as a lazily built DFA for yes/no answers and as a Pike VM (threads
in priority order) where `{name}` placeholders capture. A backtracking regex takes about n^7 steps for
`*a*a*a*a*a*a*b` on one long name; here every character costs one table lookup (or one pass over at most
len(pattern) threads).

Syntax, as before: `**/` spans any number of whole segments (also none), a trailing `/**` everything under
a directory, a bare `**` any text, `*` and `?` stay within one segment, and with `placeholders` `{name}`
captures one segment's non-empty text (shortest first, as the regex `[^/]+?` it replaces)."""

from __future__ import annotations

import re
from collections.abc import Sequence

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")

# Node kinds of the automaton: a node consumes one character (CHAR, NOTSLASH, ANY), or is an epsilon
# (SPLIT: two ways on, the first preferred; SAVE: records a capture boundary), or ACCEPT.
CHAR, NOTSLASH, ANY, SPLIT, SAVE, ACCEPT = range(6)
_MAX_DFA_STATES = 4096  # past this the cache is dropped and rebuilt: memory stays bounded, time linear


class _Node:
    __slots__ = ("kind", "char", "out", "alt", "slot", "owner")

    def __init__(self, kind: int, char: str = "", out: _Node | None = None, alt: _Node | None = None):
        self.kind, self.char, self.out, self.alt = kind, char, out, alt
        self.slot = 0
        self.owner = -1  # for ACCEPT: the index of the glob it accepts


def _compile(pattern: str, nxt: _Node, placeholders: bool, names: list[str]) -> _Node:
    """The automaton of `pattern`, leading to `nxt`; built from the end, so each piece knows its successor."""
    pieces: list[tuple[str, str]] = []
    i, n = 0, len(pattern)
    while i < n:
        if pattern.startswith("**/", i):
            pieces.append(("anydirs", ""))
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == n:
            pieces.append(("under", ""))
            i += 3
        elif pattern.startswith("**", i):
            pieces.append(("anything", ""))
            i += 2
        elif pattern[i] == "*":
            pieces.append(("segment", ""))
            i += 1
        elif pattern[i] == "?":
            pieces.append(("one", ""))
            i += 1
        elif placeholders and (m := PLACEHOLDER.match(pattern, i)):
            pieces.append(("capture", m.group(1)))
            i = m.end()
        else:
            pieces.append(("char", pattern[i]))
            i += 1
    for kind, arg in reversed(pieces):
        if kind == "char":
            nxt = _Node(CHAR, arg, nxt)
        elif kind == "one":
            nxt = _Node(NOTSLASH, out=nxt)
        elif kind in ("segment", "anything"):  # `[^/]*` or `.*`, greedy
            loop = _Node(SPLIT, alt=nxt)
            loop.out = _Node(NOTSLASH if kind == "segment" else ANY, out=loop)
            nxt = loop
        elif kind == "anydirs":  # `(?:.*/)?`: the group first, as the regex prefers it
            inner = _Node(SPLIT)
            inner.out = _Node(ANY, out=inner)
            inner.alt = _Node(CHAR, "/", nxt)
            nxt = _Node(SPLIT, out=inner, alt=nxt)
        elif kind == "under":  # `(?:/.*)?`
            rest = _Node(SPLIT, alt=nxt)
            rest.out = _Node(ANY, out=rest)
            nxt = _Node(SPLIT, out=_Node(CHAR, "/", rest), alt=nxt)
        else:  # capture: `([^/]+?)`, shortest first
            k = len(names)
            names.append(arg)
            end = _Node(SAVE, out=nxt)
            end.slot = 2 * k + 1
            loop = _Node(SPLIT, out=end)
            first = _Node(NOTSLASH, out=loop)
            loop.alt = _Node(NOTSLASH, out=loop)
            start = _Node(SAVE, out=first)
            start.slot = 2 * k
            nxt = start
    return nxt


def _closure(starts: Sequence[_Node]) -> list[_Node]:
    """Every node reachable from `starts` through epsilons that consumes a character or accepts, in
    priority order, each once."""
    out: list[_Node] = []
    seen: set[int] = set()
    stack = list(reversed(starts))
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.kind == SPLIT:
            assert node.out is not None and node.alt is not None
            stack.append(node.alt)
            stack.append(node.out)
        elif node.kind == SAVE:
            assert node.out is not None
            stack.append(node.out)
        else:
            out.append(node)
    return out


def _step(node: _Node, ch: str) -> bool:
    if node.kind == CHAR:
        return node.char == ch
    if node.kind == NOTSLASH:
        return ch != "/"
    return node.kind == ANY


class GlobSet:
    """Globs matched together: `first(path)` is the index of the first glob (in order) that matches the
    whole path, or None, in one pass over the path."""

    def __init__(self, patterns: Sequence[str]):
        self.patterns = list(patterns)
        starts = []
        for k, p in enumerate(self.patterns):
            accept = _Node(ACCEPT)
            accept.owner = k
            starts.append(_compile(p, accept, False, []))
        self._literals = {ch for p in self.patterns for ch in p if ch not in "*?/"}
        # the one character that stands for every character no pattern names (none of them, nor `/`)
        self._other = next(chr(c) for c in range(1, 0x110000) if chr(c) not in self._literals and chr(c) != "/")
        self._states: dict[frozenset[int], int] = {}
        self._nodes: list[list[_Node]] = []
        self._winner: list[int | None] = []
        self._next: list[dict[str, int]] = []  # per state: character -> state
        self._by_class: list[dict[str | None, int]] = []  # per state: character class -> state
        self._dirs: dict[str, int] = {}  # directory prefix (`a/b/`) -> the state after it
        self._start_nodes = _closure(starts)
        self._start = self._state(self._start_nodes)

    def _state(self, nodes: list[_Node]) -> int:
        key = frozenset(id(n) for n in nodes)
        found = self._states.get(key)
        if found is not None:
            return found
        self._states[key] = len(self._nodes)
        self._nodes.append(nodes)
        owners = [n.owner for n in nodes if n.kind == ACCEPT]
        self._winner.append(min(owners) if owners else None)
        self._next.append({})
        self._by_class.append({})
        return len(self._nodes) - 1

    def first(self, path: str) -> int | None:
        if not self.patterns:
            return None
        if len(self._nodes) > _MAX_DFA_STATES or len(self._dirs) > _MAX_DFA_STATES:
            self._states.clear()
            self._nodes.clear()
            self._winner.clear()
            self._next.clear()
            self._by_class.clear()
            self._dirs.clear()
            self._start = self._state(self._start_nodes)
        # Paths share their directories: the state after a directory prefix is looked up, not re-run.
        cut = path.rfind("/") + 1
        state = self._dirs.get(path[:cut]) if cut else self._start
        if state is None:
            state = self._dirs[path[:cut]] = self._run(self._start, path[:cut])
        return self._winner[self._run(state, path[cut:])]

    def _run(self, state: int, text: str) -> int:
        table = self._next
        for ch in text:
            nxt = table[state].get(ch)  # keyed by the character itself: the alphabet a tree uses is small
            if nxt is None:
                nxt = table[state][ch] = self._move(state, ch)
            state = nxt
        return state

    def _move(self, state: int, ch: str) -> int:
        # every character no pattern names (and not `/`) moves alike: computed once, as self._other
        key = ch if ch == "/" or ch in self._literals else None
        by_class = self._by_class[state]
        if key not in by_class:
            probe = ch if key is not None else self._other
            moved = [n.out for n in self._nodes[state] if n.kind != ACCEPT and _step(n, probe)]
            by_class[key] = self._state(_closure([m for m in moved if m is not None]))
        return by_class[key]

    def matches(self, path: str) -> bool:
        return self.first(path) is not None


def select(paths: Sequence[str], include: Sequence[str], exclude: Sequence[str] = ()) -> list[str]:
    """The paths (in their order) that match an `include` glob and no `exclude` glob."""
    if not include:
        return []
    keep, drop = GlobSet(include), GlobSet(exclude)
    return [p for p in paths if keep.first(p) is not None and (not exclude or drop.first(p) is None)]


class CaptureGlob:
    """One glob with `{name}` placeholders: `match(path)` gives each placeholder's text, or None. A Pike VM:
    the threads alive at each character, in priority order, at most one per automaton node."""

    def __init__(self, pattern: str):
        self.pattern = pattern
        self.names: list[str] = []
        self._start = _compile(pattern, _Node(ACCEPT), True, self.names)

    def match(self, path: str) -> dict[str, str] | None:
        slots: list[int] = [-1] * (2 * len(self.names))
        threads = self._add([], set(), self._start, tuple(slots), 0)
        for pos, ch in enumerate(path):
            nxt: list[tuple[_Node, tuple[int, ...]]] = []
            seen: set[int] = set()
            for node, saved in threads:
                if node.kind != ACCEPT and _step(node, ch):
                    assert node.out is not None
                    self._add(nxt, seen, node.out, saved, pos + 1)
            threads = nxt
            if not threads:
                return None
        for node, saved in threads:
            if node.kind == ACCEPT:  # the first accepting thread is the one backtracking would find
                return {name: path[saved[2 * k] : saved[2 * k + 1]] for k, name in enumerate(self.names)}
        return None

    @staticmethod
    def _add(
        out: list[tuple[_Node, tuple[int, ...]]], seen: set[int], node: _Node, saved: tuple[int, ...], pos: int
    ) -> list[tuple[_Node, tuple[int, ...]]]:
        stack: list[tuple[_Node, tuple[int, ...]]] = [(node, saved)]
        while stack:
            n, s = stack.pop()
            if id(n) in seen:
                continue
            seen.add(id(n))
            if n.kind == SPLIT:
                assert n.out is not None and n.alt is not None
                stack.append((n.alt, s))
                stack.append((n.out, s))
            elif n.kind == SAVE:
                assert n.out is not None
                stack.append((n.out, s[: n.slot] + (pos,) + s[n.slot + 1 :]))
            else:
                out.append((n, s))
        return out
