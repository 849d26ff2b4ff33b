"""The two lists env-doc reads: the documented names (ENVIRONMENT.md's table) and the allowlist file."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ...checks.env_doc.envscan import EnvRead
from ...linear import Meter

_BACKTICKED = re.compile(r"`([^`]+)`")
ALLOWLIST_HEADER = """\
# Env vars the code reads that docs/ENVIRONMENT.md does not document, one per line, sorted by name:
#   NAME  CLASS  reason
# CLASS is one of env_doc.classes in .agents/config.yaml. A name nothing reads any more fails the
# env-doc check; `rowgate check env-doc --fix` adds stubs for a person to classify.
"""


def documented_names(
    text: str, headers: tuple[str, ...] = ("flag",), meter: Meter | None = None
) -> dict[str, int] | None:
    """Backticked names in the first column of every table whose first header cell is one of `headers`
    (any case: `| flag |`, `| Variable |`), with lines; None when there is no such table. `meter` counts
    each line's passes (strip, split, the cell strips, the backtick search)."""
    wanted = {h.lower() for h in headers}
    names: dict[str, int] = {}
    in_table = found = False
    for n, line in enumerate(text.splitlines(), 1):
        if meter:
            meter.add(0, 5 * len(line) + 1)
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else None
        if cells is None:
            in_table = False
        elif not in_table:
            in_table = cells[0].strip("`* ").lower() in wanted
            found = found or in_table
        elif not set(cells[0]) <= set("-: "):
            for name in _BACKTICKED.findall(cells[0]):
                names.setdefault(name, n)
    return names if found else None


@dataclass(frozen=True)
class AllowEntry:
    name: str
    cls: str
    reason: str
    line: int


@dataclass
class Allowlist:
    entries: list[AllowEntry] = field(default_factory=list)
    problems: list[tuple[int, str]] = field(default_factory=list)  # (line, message) of malformed lines

    def names(self) -> set[str]:
        return {e.name for e in self.entries}


def parse_allowlist(text: str, classes: list[str], prefixes: tuple[str, ...], fmt: str = "classified") -> Allowlist:
    """`NAME  CLASS  reason` per line (`fmt` classified) or one `NAME` per line (`fmt` names); `#` starts a
    comment. A line missing its class or reason (or, one name per line, with more than the name), with an
    unknown class, a name outside the prefixes, or a repeated name is a problem, but still an entry."""
    out, seen = Allowlist(), set()
    for n, raw in enumerate(text.splitlines(), 1):
        line = re.split(r"(?:^|\s)#", raw, maxsplit=1)[0].strip()
        if not line:
            continue
        name, cls, reason = (line.split(None, 2) + ["", ""])[:3]
        missing = [what for what, value in (("class", cls), ("reason", reason)) if not value]
        if fmt == "names":
            if cls:
                extra = line[len(name) :].strip()
                out.problems.append((n, f"{name}: one name per line, nothing after it (found {extra!r})"))
        elif missing:
            out.problems.append(
                (
                    n,
                    (
                        f"{name} has no {' and no '.join(missing)}: write `{name}  CLASS  reason` "
                        f"with CLASS one of {', '.join(classes)}"
                    ),
                )
            )
        elif cls not in classes:
            out.problems.append((n, f"{name}: class {cls!r} is not one of {', '.join(classes)}"))
        if not name.startswith(prefixes):
            out.problems.append((n, f"{name} does not start with {' or '.join(prefixes)}"))
        if name in seen:
            out.problems.append((n, f"{name} is listed twice"))
        seen.add(name)
        out.entries.append(AllowEntry(name, cls, reason, n))
    return out


def first_unsorted(allow: Allowlist) -> tuple[AllowEntry, AllowEntry] | None:
    """The first entry that sorts before the entry above it, with that entry."""
    for above, entry in zip(allow.entries, allow.entries[1:]):
        if entry.name < above.name:
            return entry, above
    return None


def add_stubs(text: str, reads: list[EnvRead]) -> tuple[str, int]:
    """Insert one stub line per name, each at its sorted place among the entries; no line is removed.
    A stub has no class and no reason, so the check keeps failing until a person writes them."""
    lines = text.splitlines() if text else ALLOWLIST_HEADER.splitlines()
    first: dict[str, EnvRead] = {}
    for r in reads:
        first.setdefault(r.name, r)
    for name in sorted(first, reverse=True):
        r = first[name]
        stub = f"{name}  # stub from --fix: read at {r.path}:{r.line}; write its class and a reason"
        at = len(lines)
        for i, line in enumerate(lines):
            words = re.split(r"(?:^|\s)#", line, maxsplit=1)[0].split()
            if words and words[0] > name:
                at = i
                break
        lines.insert(at, stub)
    return "\n".join(lines) + "\n", len(first)
