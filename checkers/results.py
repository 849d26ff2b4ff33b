"""One result model for every check: a status, what was examined, and findings with stable rule ids.

Named tuples and a plain class rather than pydantic models or dataclasses: results are built by our own
code, never read from outside, and a commit-msg hook starts on every commit, where importing pydantic
(or `dataclasses`, which imports `inspect`) would cost more than the check.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, NamedTuple

# Exit codes shared by the CLI, the scripts and the preflight.
EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_ERROR = 0, 1, 2, 3


class Status(str, Enum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"
    ERROR = "error"  # could not verify


class Rule(NamedTuple):
    """A rule has a stable id (never reused once retired) and a kebab-case name; both work on the CLI."""

    id: str
    name: str
    summary: str

    def finding(
        self,
        message: str,
        path: str | None = None,
        line: int | None = None,
        hint: str | None = None,
        commit: str | None = None,
    ) -> Finding:
        return Finding(rule=self.id, name=self.name, message=message, path=path, line=line, hint=hint, commit=commit)


class Finding(NamedTuple):
    rule: str
    name: str
    message: str
    path: str | None = None  # relative to the repository root
    line: int | None = None
    hint: str | None = None
    commit: str | None = None  # the full sha a commit-level finding is about

    def location(self) -> str:
        if self.path is None:
            return ""
        return f"{self.path}:{self.line}" if self.line else self.path


class Result:
    """One check's outcome; the runner sets `duration_s` after the check returns."""

    __slots__ = ("check", "status", "summary", "examined", "unit", "findings", "details", "hint", "duration_s")

    def __init__(
        self,
        check: str,
        status: Status,
        summary: str,
        examined: int = 0,
        unit: str = "items",
        findings: list[Finding] | None = None,
        details: list[str] | None = None,
        hint: str | None = None,
        duration_s: float = 0.0,
    ):
        self.check = check
        self.status = status
        self.summary = summary
        self.examined = examined
        self.unit = unit
        self.findings: list[Finding] = [] if findings is None else findings
        self.details: list[str] = [] if details is None else details  # extra lines: tables, printed debt
        self.hint = hint
        self.duration_s = duration_s

    def __repr__(self) -> str:
        return f"Result({', '.join(f'{k}={getattr(self, k)!r}' for k in self.__slots__)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Result) and all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    @classmethod
    def judge(
        cls, check: str, findings: list[Finding], examined: int, unit: str, ok: str, details: list[str] | None = None
    ) -> Result:
        """Fail on any finding; a check that examined nothing has not passed (it is an error)."""
        details = list(details or [])
        if findings:
            n = len(findings)
            return cls(
                check=check,
                status=Status.FAIL,
                examined=examined,
                unit=unit,
                findings=findings,
                details=details,
                summary=f"{n} finding{'s' if n != 1 else ''} in {examined} {unit}",
            )
        if examined == 0:
            return cls(
                check=check,
                status=Status.ERROR,
                examined=0,
                unit=unit,
                details=details,
                summary=f"examined 0 {unit}: nothing was verified",
                hint="point the check at the inputs it should examine",
            )
        return cls(check=check, status=Status.PASS, examined=examined, unit=unit, details=details, summary=ok)

    @classmethod
    def skip(cls, check: str, reason: str) -> Result:
        return cls(check=check, status=Status.SKIP, summary=reason)

    @classmethod
    def error(cls, check: str, reason: str, hint: str | None = None) -> Result:
        return cls(check=check, status=Status.ERROR, summary=reason, hint=hint)

    def to_json(self) -> dict[str, Any]:
        """The result as JSON-ready data (the `results` items of `--format json`)."""
        data = {k: getattr(self, k) for k in self.__slots__}
        return {**data, "status": self.status.value, "findings": [f._asdict() for f in self.findings]}

    @property
    def exit_code(self) -> int:
        return {Status.PASS: EXIT_PASS, Status.SKIP: EXIT_PASS, Status.FAIL: EXIT_FAIL, Status.ERROR: EXIT_ERROR}[
            self.status
        ]


def exit_code(results: list[Result], fail_on_skip: bool = False) -> int:
    """The worst outcome wins: error (3) over fail (1) over pass (0); a skip fails only when asked."""
    statuses = {r.status for r in results}
    if Status.ERROR in statuses:
        return EXIT_ERROR
    if Status.FAIL in statuses or (fail_on_skip and Status.SKIP in statuses):
        return EXIT_FAIL
    return EXIT_PASS


class CheckError(Exception):
    """Raised inside a check when it cannot verify; the runner turns it into an `error` result."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


class RecordError(Exception):
    """A file that does not load or validate; `problems` holds (line, field, message) triples.
    Defined here rather than in `yamlio` so that catching it does not import ruamel.yaml and pydantic."""

    def __init__(self, path: str, problems: list[tuple[int | None, str, str]]):
        self.path = path
        self.problems = problems
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        out = []
        for line, field_, message in self.problems:
            where = f"{self.path}:{line}" if line else self.path
            out.append(f"{where}: {field_}: {message}" if field_ else f"{where}: {message}")
        return out
