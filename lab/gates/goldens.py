"""Committed golden token ids: a file per case with its sha256, checked and regenerated under the near-tie bar."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from lab.gates.result import FAIL, PASS, GateResult

GOLDENS_DIR = Path(__file__).parent / "goldens"
SCHEMA = 1


def digest(case: dict[str, Any]) -> str:
    """sha256 over the fields that define a golden: model, dtype, device, budget, prompts and ids."""
    keyed = {k: case[k] for k in ("model", "dtype", "device", "max_new_tokens", "prompts", "tokens")}
    return hashlib.sha256(json.dumps(keyed, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def make_golden(
    model: str, dtype: str, device: str, max_new_tokens: int, prompts: list[list[int]], tokens: list[list[int]]
) -> dict[str, Any]:
    case = {
        "schema": SCHEMA,
        "model": model,
        "dtype": dtype,
        "device": device,
        "max_new_tokens": max_new_tokens,
        "prompts": prompts,
        "tokens": tokens,
    }
    case["sha256"] = digest(case)
    return case


def read_golden(path: Path) -> dict[str, Any]:
    """A golden file, with its sha256 verified (a hand-edited id fails here, naming the file)."""
    case = json.loads(path.read_text())
    missing = [
        k
        for k in ("schema", "model", "dtype", "device", "max_new_tokens", "prompts", "tokens", "sha256")
        if k not in case
    ]
    if missing:
        raise ValueError(f"{path}: golden lacks {', '.join(missing)}")
    if case["sha256"] != digest(case):
        raise ValueError(
            f"{path}: sha256 {case['sha256'][:12]}... does not match its contents "
            f"({digest(case)[:12]}...): regenerate with `python -m lab gate regen`"
        )
    return case


def write_golden(path: Path, case: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(case, indent=1)
    # one line per id list, so a diff of a regenerated golden shows which prompt changed
    text = re.sub(r"\[[\d,\s]*\]", lambda m: json.dumps(json.loads(m.group(0))), text)
    path.write_text(text + "\n")


def golden_gate(path: Path, ours: list[list[int]]) -> GateResult:
    """Our ids for the golden's prompts against its committed ids."""
    case = read_golden(path)
    table = []
    for i, (a, b) in enumerate(zip(ours, case["tokens"], strict=True)):
        first = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), None)
        table.append({"prompt": i, "new_tokens": len(b), "first_divergence": first})
    bad = [r for r in table if r["first_divergence"] is not None]
    name = path.name
    if bad:
        return GateResult(
            "goldens", FAIL, f"{name}: {len(bad)} of {len(table)} prompts diverge from the committed ids", table
        )
    return GateResult(
        "goldens", PASS, f"{name}: {len(table)} prompts equal the committed ids (sha256 {case['sha256'][:12]})", table
    )
