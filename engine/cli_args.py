"""Command-line pieces that `generate` (engine/cli.py) and the gates (lab/gates/cli.py) share."""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.runner import DTYPES

TINY_MODEL = Path(__file__).resolve().parent / "data" / "tiny-qwen3"


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model", type=Path, default=TINY_MODEL, help="Hugging Face model directory (default: the embedded tiny Qwen3)"
    )
    p.add_argument(
        "--dtype",
        choices=["auto", *sorted(DTYPES)],
        default="auto",
        help="activation and weight dtype (default auto: the checkpoint's torch_dtype, float32 if none)",
    )
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")


def parse_ids(text: str) -> list[int]:
    try:
        ids = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise ValueError(f"--prompt-ids {text!r}: expected comma-separated integers") from None
    if not ids:
        raise ValueError(f"--prompt-ids {text!r}: no ids")
    return ids
