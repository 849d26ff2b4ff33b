"""Read a record the lab wrote, as a reader of the ledger would: valid against the toolkit's schema 2, with its
`details` file (where a bulky `results` went) read back in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from checkers.ledger_schema import LedgerRecord2


def read_record(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    LedgerRecord2.model_validate(data)
    if data.get("details"):
        # `details` is relative to the checkout; the record's folder holds details/<name> beside it
        data["results"] = json.loads((path.parent / "details" / path.name).read_text())
    return data
