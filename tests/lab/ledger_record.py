"""Read a record the lab wrote, as a reader of the ledger would: valid against the toolkit's schema 2, with the
per-case arrays its `details` side file holds put back into `results` (the file's sha256 checked)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from checkers.ledger_schema import LedgerRecord2
from lab.gates.ledger_details import join_details


def read_record(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    LedgerRecord2.model_validate(data)
    data["results"] = join_details(data)
    return data
