"""Patterns from the config, compiled once at config load and run with a time limit: the `regex`
package's `timeout=` stops a catastrophic backtrack (`(a+)+$` on a long value) and the check reports
`error` naming the pattern, instead of hanging."""

from __future__ import annotations

from functools import cache
from typing import Any

from .results import CheckError

TIMEOUT_S = 1.0  # per match; a linear pattern on a trailer value takes microseconds


class PatternTimeout(CheckError):
    """A configured pattern ran past its time limit on one value."""


class SafePattern:
    """A compiled pattern whose matches stop after TIMEOUT_S (PatternTimeout)."""

    def __init__(self, pattern: str, flags: int = 0):
        # the regex package loads with the first pattern (~15 ms): a contract without one, as dco's, never pays it
        import regex  # type: ignore[import-untyped, unused-ignore]

        self.pattern = pattern
        self._compiled = regex.compile(pattern, flags)

    def fullmatch(self, text: str) -> Any:
        return self._run(self._compiled.fullmatch, text)

    def search(self, text: str) -> Any:
        return self._run(self._compiled.search, text)

    def match(self, text: str) -> Any:
        return self._run(self._compiled.match, text)

    def _run(self, method: Any, text: str) -> Any:
        try:
            return method(text, timeout=TIMEOUT_S)
        except TimeoutError:
            raise PatternTimeout(
                f"pattern {self.pattern!r} ran past {TIMEOUT_S:g}s on a {len(text)}-character value",
                hint="simplify the pattern in .agents/config.yaml: nested quantifiers such as "
                "(a+)+ backtrack without end",
            ) from None


@cache
def compile_pattern(pattern: str, flags: int = 0) -> SafePattern:
    """The pattern compiled once; ValueError (with the reason) when it is not a valid regex."""
    import regex  # type: ignore[import-untyped, unused-ignore]

    try:
        return SafePattern(pattern, flags)
    except (regex.error, TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"invalid regex {pattern!r}: {exc}") from None


def checked(pattern: str) -> str:
    """`pattern` itself when it compiles (the config's validator: pydantic names the file and line)."""
    compile_pattern(pattern)
    return pattern
