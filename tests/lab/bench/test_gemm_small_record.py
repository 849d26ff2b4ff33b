"""The small GEMM bench's ledger record: valid against the toolkit's schema, its figures the worst plain and the
worst prologue ratio of the table it was given (the bench itself needs a GPU)."""

from __future__ import annotations

from lab.bench import gemm_small
from tests.lab.ledger_record import read_record


def row(name: str, ratio: float) -> dict:
    return {
        "name": name,
        "n": 4096,
        "k": 1024,
        "base_us": 10.0,
        "test_us": 10.0 / ratio,
        "base_tbs": 1.0,
        "test_tbs": ratio,
        "ratio": ratio,
        "verdict": "slower" if ratio < 1 else "faster",
        "diff": 0.0,
    }


def test_the_record_names_the_worst_ratio_of_each_kind(tmp_path):
    rows = [row("qkv", 0.73), row("o", 0.44), row("qkv+norm", 0.09), row("gate_up+norm", 0.08)]
    path = gemm_small.record(tmp_path, rows, 32, "bfloat16", "python -m lab bench gemm_small --ledger X", True)
    data = read_record(path)
    figures = {f["name"]: f["value"] for f in data["figures"]}
    assert figures == {"worst_plain_ratio": 0.44, "worst_prologue_ratio": 0.08}
    assert "plain 0.44-0.73x" in data["summary"] and "prologue 0.08-0.09x" in data["summary"]
    assert [r["name"] for r in data["results"]["shapes"]] == ["qkv", "o", "qkv+norm", "gate_up+norm"]
    assert data["rows"] == ["ENGINE-PERSISTENT"]


def test_a_refused_shape_is_named_and_left_out_of_the_figures(tmp_path):
    refused = {"name": "down", "n": 1024, "k": 3072, "verdict": gemm_small.REFUSED}
    rows = [row("qkv", 0.9), refused, row("qkv+norm", 0.3)]
    path = gemm_small.record(tmp_path, rows, 32, "bfloat16", "python -m lab bench gemm_small --ledger X", True)
    data = read_record(path)
    assert {f["name"]: f["value"] for f in data["figures"]} == {"worst_plain_ratio": 0.9, "worst_prologue_ratio": 0.3}
    assert data["summary"].endswith("; refused: down")
    only_plain = gemm_small.record(tmp_path, [row("o", 0.5)], 8, "bfloat16", "python -m lab bench gemm_small", True)
    assert [f["name"] for f in read_record(only_plain)["figures"]] == ["worst_plain_ratio"]  # no empty min()
