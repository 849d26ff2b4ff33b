"""Paths of the repository as the checks see them: root-anchored globs, and the one way a check lists files
(Context.files: the tracked paths, from one `git ls-files` per run, filtered here)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def glob_regex(pattern: str, placeholders: bool = False) -> str:
    """A regex for a glob anchored at the repository root: `**` spans any number of segments
    (`a/**` is everything under a/, `**/x` is x at any depth), `*` and `?` stay within one segment,
    and with `placeholders` a `{name}` captures one segment's text."""
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


def select(paths: Iterable[str], include: Sequence[str], exclude: Sequence[str] = ()) -> list[str]:
    """The paths (in their order) that match an `include` glob and no `exclude` glob."""
    keep = re.compile("|".join(glob_regex(g) for g in include)) if include else None
    drop = re.compile("|".join(glob_regex(g) for g in exclude)) if exclude else None
    return [p for p in paths if keep is not None and keep.fullmatch(p) and not (drop and drop.fullmatch(p))]
