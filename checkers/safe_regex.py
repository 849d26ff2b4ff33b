"""Patterns from the config, compiled once at config load and run with a time limit: the `regex`
package's `timeout=` stops a catastrophic backtrack (`(a+)+$` on a long value) and the check reports
`error` naming the pattern, instead of hanging. The limit is per value and, for all configured patterns
together, per check run (RUN_BUDGET_S): 140 values that each take just under the per-value limit would
otherwise add up to minutes.

rowgate's own patterns (the built-in presets' and literals it escapes itself) are linear by construction: they
are compiled `trusted`, with the standard library's `re` and no limit, so a contract of presets alone starts
without loading the regex package."""

from __future__ import annotations

import re
import time
from functools import cache
from typing import Any

from .results import CheckError

TIMEOUT_S = 1.0  # per match; a linear pattern on a trailer value takes microseconds
RUN_BUDGET_S = 5.0  # every configured pattern's matches of one check run together
_budget = {"total": RUN_BUDGET_S, "left": RUN_BUDGET_S}  # the current run's (start_run() resets it)


def start_run(budget_s: float | None = None) -> None:
    """Give the check run that starts now its whole budget (RUN_BUDGET_S, or `budget_s`)."""
    total = RUN_BUDGET_S if budget_s is None else budget_s
    _budget.update(total=total, left=total)


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
        if not self._limit:
            return method(text)
        left = _budget["left"]
        if left <= 0:
            raise self._over_budget()
        limit = min(TIMEOUT_S, left)
        start = time.perf_counter()
        try:
            return method(text, timeout=limit)
        except TimeoutError:
            if limit < TIMEOUT_S:
                raise self._over_budget() from None
            raise PatternTimeout(
                f"pattern {self.pattern!r} ran past {TIMEOUT_S:g}s on a {len(text)}-character value",
                hint="simplify the pattern in .agents/config.yaml: nested quantifiers such as "
                "(a+)+ backtrack without end",
            ) from None
        finally:
            _budget["left"] -= time.perf_counter() - start

    def _over_budget(self) -> PatternTimeout:
        return PatternTimeout(
            f"configured patterns ran past their budget of {_budget['total']:g}s for this check run "
            f"(last: {self.pattern!r})",
            hint="simplify the patterns in .agents/config.yaml: nested quantifiers such as (a+)+ backtrack "
            "on every value",
        )


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
