"""One result type for every gate: a verdict, a one-line summary, a table and JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

PASS, FAIL, REFUSED = "PASS", "FAIL", "REFUSED"


@dataclass
class GateResult:
    gate: str
    verdict: str  # PASS, FAIL or REFUSED (the gate may not be applied here)
    summary: str
    table: list[dict[str, Any]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.verdict == PASS

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def render(self, columns: list[str] | None = None) -> str:
        lines = []
        if self.table:
            cols = columns or list(self.table[0])
            cells = [[_fmt(row.get(c)) for c in cols] for row in self.table]
            widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(cols)]
            lines.append("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
            lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
        lines.append(f"{self.gate}: {self.verdict}: {self.summary}")
        return "\n".join(lines)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4f}"
    return "-" if v is None else str(v)
