"""Every ledger record file is at most `record.ledger_size_cap` bytes, unless a reviewed exemption names it.

A record holds its summary, figures and per-arm counts; per-case arrays go to a side file outside the
repository (named by its sha256) or are dropped. An exemption that is no longer needed (the record shrank,
or is gone) is a finding too, so the list only shrinks."""

from __future__ import annotations

from ...checks.records.rules import R_SIZE
from ...records import Records
from ...results import Finding

FIX = (
    "move per-case arrays into a side file outside the repository and name it by sha256 in `details` "
    "(scripts/ledger-trim.py does it for a written record); keep the summary, figures and per-arm counts"
)


def check_sizes(records: Records, cap: int, exempt: dict[str, str]) -> list[Finding]:
    findings = []
    sizes = record_sizes(records)
    for path, size in sorted(sizes.items()):
        if size > cap and path not in exempt:
            findings.append(R_SIZE.finding(f"{size} bytes (cap {cap})", path, None, FIX))
    for path in sorted(exempt):
        held = sizes.get(path)
        if held is None or held <= cap:
            what = "is not a ledger record" if held is None else f"is {held} bytes, within the cap {cap}"
            findings.append(
                R_SIZE.finding(
                    f"record.ledger_size_exempt names {path}, which {what}",
                    None,
                    None,
                    "remove the entry from record.ledger_size_exempt",
                )
            )
    return findings


def record_sizes(records: Records) -> dict[str, int]:
    """Bytes of each ledger record read from its own file (a table line has no file to cap)."""
    out = {}
    for entry in records.ledger.values():
        text = getattr(entry.doc, "text", None)
        if entry.line is None and isinstance(text, str):
            out[entry.path] = len(text.encode("utf-8"))
    return out
