"""One result model for every check: a status, what was examined, and findings with stable rule ids."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum

# Exit codes shared by the CLI, the scripts and the preflight.
EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_ERROR = 0, 1, 2, 3


class Status(str, Enum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"
    ERROR = "error"  # could not verify


@dataclass(frozen=True)
class Rule:
    """A rule has a stable id (never reused once retired) and a kebab-case name; both work on the CLI."""

    id: str
    name: str
    summary: str

    def finding(self, message: str, path: str | None = None, line: int | None = None,
                hint: str | None = None) -> Finding:
        return Finding(rule=self.id, name=self.name, message=message, path=path, line=line, hint=hint)


# Plain dataclasses, not pydantic models: results are built by our own code, never read from outside,
# and importing pydantic would cost a commit-msg hook more than its whole check.
@dataclass(frozen=True)
class Finding:
    rule: str
    name: str
    message: str
    path: str | None = None  # relative to the repository root
    line: int | None = None
    hint: str | None = None

    def location(self) -> str:
        if self.path is None:
            return ""
        return f"{self.path}:{self.line}" if self.line else self.path


@dataclass
class Result:
    check: str
    status: Status
    summary: str
    examined: int = 0
    unit: str = "items"
    findings: list[Finding] = field(default_factory=list)
    details: list[str] = field(default_factory=list)  # extra lines: tables, printed debt
    hint: str | None = None
    duration_s: float = 0.0

    @classmethod
    def judge(cls, check: str, findings: list[Finding], examined: int, unit: str,
              ok: str, details: list[str] | None = None) -> Result:
        """Fail on any finding; a check that examined nothing has not passed (it is an error)."""
        details = list(details or [])
        if findings:
            n = len(findings)
            return cls(check=check, status=Status.FAIL, examined=examined, unit=unit,
                       findings=findings, details=details,
                       summary=f"{n} finding{'s' if n != 1 else ''} in {examined} {unit}")
        if examined == 0:
            return cls(check=check, status=Status.ERROR, examined=0, unit=unit, details=details,
                       summary=f"examined 0 {unit}: nothing was verified",
                       hint="point the check at the inputs it should examine")
        return cls(check=check, status=Status.PASS, examined=examined, unit=unit,
                   details=details, summary=ok)

    @classmethod
    def skip(cls, check: str, reason: str) -> Result:
        return cls(check=check, status=Status.SKIP, summary=reason)

    @classmethod
    def error(cls, check: str, reason: str, hint: str | None = None) -> Result:
        return cls(check=check, status=Status.ERROR, summary=reason, hint=hint)

    def to_json(self) -> dict:
        """The result as JSON-ready data (the `results` items of `--format json`)."""
        return {**asdict(self), "status": self.status.value}

    @property
    def exit_code(self) -> int:
        return {Status.PASS: EXIT_PASS, Status.SKIP: EXIT_PASS,
                Status.FAIL: EXIT_FAIL, Status.ERROR: EXIT_ERROR}[self.status]


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
