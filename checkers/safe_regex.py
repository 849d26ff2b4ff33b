"""Patterns from the config, compiled once at config load and run with a time limit: the `regex`
package's `timeout=` stops a catastrophic backtrack (`(a+)+$` on a long value) and the check reports
`error` naming the pattern, instead of hanging.

rowgate's own patterns (the built-in presets' and literals it escapes itself) are linear by construction: they
are compiled `trusted`, with the standard library's `re` and no limit, so a contract of presets alone starts
without loading the regex package."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from .results import CheckError

TIMEOUT_S = 1.0  # per match; a linear pattern on a trailer value takes microseconds


class PatternTimeout(CheckError):
    """A configured pattern ran past its time limit on one value."""


class SafePattern:
    """A compiled pattern whose matches stop after TIMEOUT_S (PatternTimeout); a `trusted` one (rowgate's
    own, linear) runs on `re` without a limit."""

    def __init__(self, pattern: str, flags: int = 0, trusted: bool = False):
        self.pattern = pattern
        self._limit: dict[str, float] = {}
        if trusted:
            self._compiled: Any = re.compile(pattern, flags)
            return
        # the regex package loads with the first configured pattern: a contract of presets never pays for it
        import regex  # type: ignore[import-untyped, unused-ignore]

        self._compiled = regex.compile(pattern, flags)
        self._limit = {"timeout": TIMEOUT_S}

    def fullmatch(self, text: str) -> Any:
        return self._run(self._compiled.fullmatch, text)

    def search(self, text: str) -> Any:
        return self._run(self._compiled.search, text)

    def match(self, text: str) -> Any:
        return self._run(self._compiled.match, text)

    def finditer(self, text: str) -> list[Any]:
        """Every match, collected under the same limit (the iteration is where the time is spent)."""
        return self._run(lambda t, **kw: list(self._compiled.finditer(t, **kw)), text)  # type: ignore[no-any-return]

    def _run(self, method: Any, text: str) -> Any:
        try:
            return method(text, **self._limit)
        except TimeoutError:
            raise PatternTimeout(
                f"pattern {self.pattern!r} ran past {TIMEOUT_S:g}s on a {len(text)}-character value",
                hint="simplify the pattern in .agents/config.yaml: nested quantifiers such as "
                "(a+)+ backtrack without end",
            ) from None


@cache
def compile_pattern(pattern: str, flags: int = 0, trusted: bool = False) -> SafePattern:
    """The pattern compiled once; ValueError (with the reason) when it is not a valid regex."""
    errors: tuple[type[Exception], ...] = (re.error, TypeError, ValueError, OverflowError)
    if not trusted:
        import regex  # type: ignore[import-untyped, unused-ignore]

        errors += (regex.error,)
    try:
        return SafePattern(pattern, flags, trusted)
    except errors as exc:
        raise ValueError(f"invalid regex {pattern!r}: {exc}") from None


def checked(pattern: str) -> str:
    """`pattern` itself when it compiles (the config's validator: pydantic names the file and line)."""
    compile_pattern(pattern)
    return pattern
