"""Path classes and pairing rules: root-anchored globs compiled once, first matching class wins."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from checkers.config import PairRule, PathClass
from checkers.files import PLACEHOLDER, glob_regex
from checkers.results import CheckError

class Classifier:
    """Maps a path to the first class (in configured order) that has a matching pattern."""

    def __init__(self, classes: list[PathClass]):
        self.classes = classes
        alternatives = [f"(?P<c{k}>{'|'.join(glob_regex(p) for p in c.paths)})" for k, c in enumerate(classes)]
        # One alternation for all classes: the regex engine tries them in order, so one match per path.
        self._regex = re.compile("|".join(alternatives)) if classes else None
        self._hints = [(c.name, _literal_segments(p), _extension(p), _literal_dir(p))
                       for c in classes for p in c.paths]

    def classify(self, path: str) -> str | None:
        m = self._regex.fullmatch(path) if self._regex else None
        return self.classes[int(m.lastgroup[1:])].name if m else None

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
    """A compiled pairing rule: `when` captures placeholders that fill in `require`."""

    rule: PairRule
    when: re.Pattern[str]
    exclude: re.Pattern[str] | None

    @classmethod
    def compile(cls, rule: PairRule) -> Pairing:
        missing = set(PLACEHOLDER.findall(rule.require)) - set(PLACEHOLDER.findall(rule.when))
        if missing:
            raise CheckError(f"pairing rule {rule.name!r}: require uses {{{sorted(missing)[0]}}}, which when "
                             "does not capture", hint="use only placeholders that appear in `when`")
        exclude = re.compile("|".join(glob_regex(p) for p in rule.exclude)) if rule.exclude else None
        return cls(rule, re.compile(glob_regex(rule.when, placeholders=True)), exclude)

    def required(self, path: str) -> str | None:
        """The path that must change with `path`, or None when the rule does not apply to it."""
        m = self.when.fullmatch(path)
        if not m or (self.exclude and self.exclude.fullmatch(path)):
            return None
        return PLACEHOLDER.sub(lambda p: m.group(p.group(1)), self.rule.require)
