"""checkers.globmatch: the linear glob matcher agrees with the backtracking regex it replaced (as an
oracle, here only) on every small pattern and path, captures included, and its work per path does not depend
on the pattern's shape."""

from __future__ import annotations

import itertools
import re

from checkers.globmatch import PLACEHOLDER, CaptureGlob, GlobSet, select


def oracle(pattern: str, placeholders: bool = False) -> str:
    """The regex translation rowgate used before (backtracking; kept as the reference semantics)."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == n:
            out.append("(?:/.*)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif placeholders and (m := PLACEHOLDER.match(pattern, i)):
            out.append(f"(?P<{m.group(1)}>[^/]+?)")
            i = m.end()
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


ATOMS = ["a", "/", "*", "**", "**/", "?", "/**", "{x}", "."]
PATHS = ["".join(p) for n in range(5) for p in itertools.product("a/.b", repeat=n)]


def test_every_small_glob_agrees_with_the_regex_it_replaced():
    checked = 0
    for n in range(1, 4):
        for parts in itertools.product(ATOMS, repeat=n):
            pattern = "".join(parts)
            if pattern.count("{x}") > 1:
                continue
            plain = pattern.replace("{x}", "b")
            rx, glob = re.compile(oracle(plain)), GlobSet([plain])
            crx, cglob = re.compile(oracle(pattern, True)), CaptureGlob(pattern)
            for path in PATHS:
                assert glob.matches(path) == bool(rx.fullmatch(path)), (plain, path)
                m = crx.fullmatch(path)
                assert cglob.match(path) == (m.groupdict() if m else None), (pattern, path)
                checked += 1
    assert checked > 200_000


def test_the_first_matching_glob_wins_and_select_keeps_order():
    globs = GlobSet(["docs/**", "**/*.md", "*"])
    assert [globs.first(p) for p in ("docs/a.md", "x/y.md", "top", "x/y.py")] == [0, 1, 2, None]
    assert select(["b.py", "a/x.py", "a.txt", "a/t/x.py"], ["**/*.py"], ["a/t/**"]) == ["b.py", "a/x.py"]
    assert select(["a"], []) == []
    assert CaptureGlob("checkers/checks/{name}.py").match("checkers/checks/pr_size.py") == {"name": "pr_size"}


def test_a_pathological_glob_on_a_long_name_takes_one_step_per_character():
    """The shapes that made the regex translation take about n^7 steps: the automaton's DFA has a handful
    of states whatever the input, so the work is counted in states built, not in time."""
    glob = GlobSet(["*a*a*a*a*a*a*b", "**/**/**/**/**/x"])
    name = "a" * 20_000
    assert glob.first(name) is None
    assert glob.first("/".join(["a"] * 5_000)) is None
    assert glob.first("a" * 100 + "b") == 0
    assert len(glob._nodes) < 64  # DFA states: bounded by the pattern, not by the path
    capture = CaptureGlob("{x}{y}*a*a*a*a*b")
    assert capture.match("a" * 3_000) is None  # Pike VM: at most one thread per node per character
