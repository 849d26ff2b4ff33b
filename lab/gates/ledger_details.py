"""A ledger record's side file: the per-case arrays that would take a record over `SIZE_CAP` bytes, moved out of
`results` (largest first) into a file outside the repository that the record names by sha256, and put back."""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

SIZE_CAP = 8192  # bytes, as checkers.ledger_schema.SIZE_CAP (the lab does not import the toolkit)


def render(record: dict[str, Any]) -> str:
    return json.dumps(record, indent=1) + "\n"


def split_results(record: dict[str, Any], results: Any, details: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """`results` as the record keeps it, and the arrays moved out by their dotted path (`results.cases`): none
    where the record fits; else the largest arrays under `results` first, until the record with `details`
    (a stand-in as long as the real one) fits; else all of it."""
    if len(render({**record, "results": results}).encode()) <= SIZE_CAP:
        return results, {}
    if not isinstance(results, dict):
        return None, {"results": results}
    kept = json.loads(json.dumps(results))  # a deep copy the moves may edit
    arrays = sorted(_arrays(kept, "results"), key=lambda a: len(json.dumps(a[1][a[2]])), reverse=True)
    moved: dict[str, Any] = {}
    for dotted, parent, key in arrays:
        moved[dotted] = parent.pop(key)
        if len(render({**record, "details": details, "results": kept}).encode()) <= SIZE_CAP:
            return kept, moved
    return None, {"results": results}


def join_details(record: dict[str, Any], side: Path | None = None) -> Any:
    """A record's `results` with the arrays its side file holds put back (`side`: where the file is kept now,
    default the path the record names). The file must be the one the record names: its sha256 is checked."""
    details = record.get("details")
    if not details:
        return record.get("results")
    body = (side or Path(details["path"])).read_bytes()
    if hashlib.sha256(body).hexdigest() != details["sha256"]:
        raise ValueError(f"{side or details['path']} is not the side file this record names (sha256 differs)")
    moved = json.loads(body)
    if "results" in moved:
        return moved["results"]
    results = json.loads(json.dumps(record.get("results")))
    for dotted, value in moved.items():
        node = results
        *parents, key = dotted.split(".")[1:]
        for name in parents:
            node = node.setdefault(name, {})
        node[key] = value
    return results


def _arrays(node: dict[str, Any], at: str) -> list[tuple[str, dict[str, Any], str]]:
    """Every array held by a key of a dict under `node` (not those inside other arrays): path, parent, key."""
    out: list[tuple[str, dict[str, Any], str]] = []
    for key, value in node.items():
        if isinstance(value, list):
            out.append((f"{at}.{key}", node, key))
        elif isinstance(value, dict):
            out += _arrays(value, f"{at}.{key}")
    return out


def default_dir(ledger_dir: Path, root: Path | None) -> Path:
    """`details/` beside a record written outside the checkout (a device run's output folder), else a temporary
    folder: per-case arrays never land in the repository."""
    inside = root is not None and ledger_dir.resolve().is_relative_to(root.resolve())
    return Path(tempfile.gettempdir()) / "ledger-details" if inside else ledger_dir / "details"
