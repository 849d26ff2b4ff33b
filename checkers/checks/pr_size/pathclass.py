"""Path classes and pairing rules: root-anchored globs compiled once, first matching class wins."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ...config import PairRule, PathClass
from ...globmatch import PLACEHOLDER, CaptureGlob, GlobSet
from ...results import CheckError

_TEMPLATE_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)((?:\|[a-z]+)*)\}")  # `{name}`, `{name|snake}`
TRANSFORMS = {"snake": lambda v: v.replace("-", "_"), "kebab": lambda v: v.replace("_", "-"), "lower": str.lower}


class Classifier:
    """Maps a path to the first class (in configured order) that has a matching pattern."""

    def __init__(self, classes: list[PathClass]):
        self.classes = classes
        # Every class's patterns in one set, in class order: the first pattern that matches names the class,
        # in one linear pass per path (checkers.globmatch).
        self._owner = [k for k, c in enumerate(classes) for _ in c.paths]
        self._globs = GlobSet([p for c in classes for p in c.paths])
        self._hints = [(c.name, _literal_segments(p), _extension(p), _literal_dir(p)) for c in classes for p in c.paths]

    def classify(self, path: str) -> str | None:
        k = self._globs.first(path)
        return None if k is None else self.classes[self._owner[k]].name

    def closest(self, path: str) -> str:
        """The class whose patterns come closest to an unclassified path: most leading directories
        shared with a pattern's literal part, then a pattern for files in the very same directory (a new
        top-level file is closest to the top-level files), then the same file extension, then the longest
        common prefix."""
        segments = path.split("/")[:-1]
        ext = _extension(path)

        def score(hint: tuple[str, list[str], str | None, bool]) -> tuple[int, int, int, int]:
            _, literal, pext, literal_dir = hint
            shared = 0
            for a, b in zip(segments, literal):
                if a != b:
                    break
                shared += 1
            prefix = len(os.path.commonprefix([path, "/".join(literal)]))
            return shared, int(literal_dir and segments == literal), int(ext is not None and ext == pext), prefix

        return max(self._hints, key=score)[0]


def _literal_segments(pattern: str) -> list[str]:
    """The leading directory segments of a pattern that hold no wildcard."""
    literal = []
    for seg in pattern.split("/")[:-1]:
        if any(ch in seg for ch in "*?["):
            break
        literal.append(seg)
    return literal


def _literal_dir(pattern: str) -> bool:
    """Whether a pattern names one directory exactly (no wildcard before its file name)."""
    return not any(ch in seg for seg in pattern.split("/")[:-1] for ch in "*?[")


def _extension(path: str) -> str | None:
    name = path.rsplit("/", 1)[-1]
    if "." not in name.lstrip(".") or "*" in name.rsplit(".", 1)[-1]:
        return None
    return name.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class Pairing:
    """A compiled pairing rule: `when` captures placeholders that fill in each `require` template, after
    that template's transforms (`{name|snake}`: kebab-case to snake_case)."""

    rule: PairRule
    when: CaptureGlob
    exclude: GlobSet | None

    @property
    def templates(self) -> list[str]:
        return [self.rule.require] if isinstance(self.rule.require, str) else list(self.rule.require)

    @classmethod
    def compile(cls, rule: PairRule) -> Pairing:
        captured = set(PLACEHOLDER.findall(rule.when))
        for template in [rule.require] if isinstance(rule.require, str) else rule.require:
            for name, transforms in _TEMPLATE_FIELD.findall(template):
                if name not in captured:
                    raise CheckError(
                        f"pairing rule {rule.name!r}: require uses {{{name}}}, which when does not capture",
                        hint="use only placeholders that appear in `when`",
                    )
                unknown = [t for t in transforms.split("|")[1:] if t not in TRANSFORMS]
                if unknown:
                    raise CheckError(
                        f"pairing rule {rule.name!r}: unknown transform {unknown[0]!r} in {template}",
                        hint=f"use one of {', '.join(TRANSFORMS)}",
                    )
        exclude = GlobSet(rule.exclude) if rule.exclude else None
        return cls(rule, CaptureGlob(rule.when), exclude)

    def required(self, path: str) -> list[str] | None:
        """The paths one of which must change with `path`, or None when the rule does not apply to it."""
        m = self.when.match(path)
        if m is None or (self.exclude and self.exclude.matches(path)):
            return None

        def fill(field: re.Match[str]) -> str:
            value = m[field.group(1)]
            for t in field.group(2).split("|")[1:]:
                value = TRANSFORMS[t](value)
            return value

        return list(dict.fromkeys(_TEMPLATE_FIELD.sub(fill, t) for t in self.templates))
