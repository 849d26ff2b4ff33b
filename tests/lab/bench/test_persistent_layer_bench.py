"""The persistent-layer bench on the CPU: its usage errors, its SKIP without a GPU, the weight floor of Qwen3-0.6B's
layer, and the ledger record of a hand-made table (valid against the toolkit's schema). The timing itself needs a
GPU."""

from __future__ import annotations

import argparse

import pytest
import torch

from lab.bench import persistent_layer as PL
from lab.cli import main as lab_main
from tests.lab.ledger_record import read_record


def test_the_defaults_and_the_batches():
    args = PL.build_parser().parse_args([])
    assert (args.batches, args.context, args.reps, args.ledger) == ([1, 8, 32], 1024, 12, None)
    assert PL.build_parser().parse_args(["--batches", "4,2"]).batches == [4, 2]


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--batches", "1,x"], "'1,x': expected comma-separated batch sizes"),
        (["--batches", "1,0"], "'1,0': every batch size must be at least 1"),
        (["--reps", "1"], "--reps 1: need at least 2 (rep 0 is dropped)"),
        (["--context", "0"], "--context 0: must be at least 1"),
    ],
)
def test_usage_errors_exit_2_with_the_reason(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        PL.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the SKIP path is the CPU's")
def test_without_a_gpu_it_skips_with_the_reason(capsys):
    assert lab_main(["bench", "persistent_layer", "--batches", "1"]) == 0
    assert capsys.readouterr().out.startswith("SKIP: no CUDA device")


def test_the_floor_of_qwen3_0_6b_layer_at_b1():
    # q/k/v: (2048 + 1024 + 1024) x 1024; o: 1024 x 2048; gate and up: 2 x 3072 x 1024; down: 1024 x 3072;
    # norms: 2 x 1024 + 2 x 128; two bytes each
    by_hand = 2 * (4096 * 1024 + 1024 * 2048 + 2 * 3072 * 1024 + 1024 * 3072 + 2 * 1024 + 2 * 128)
    assert by_hand == 31_461_888
    assert PL.layer_weight_bytes(1024, 16, 8, 128, 3072, 2) == by_hand
    # at 4.2 TB/s the floor is 7.49 us: a 14.98 us layer is at half of it
    assert PL.floor_share(by_hand, 4.2e12, 2 * by_hand / 4.2e12) == pytest.approx(0.5)
    assert by_hand / 4.2e12 * 1e6 == pytest.approx(7.4909, abs=1e-4)


def _row(batch, ratio=None, error=None):
    row = {"batch": batch, "context": 1024, "weight_bytes": 31_461_888, "chain_us": 30.0, "chain_floor_pct": 25.0}
    if error:
        row["persistent_error"] = error
    else:
        row.update(persistent_us=30.0 / ratio, persistent_floor_pct=25.0 * ratio, ratio=ratio, verdict="win")
    return row


def test_the_record_holds_the_b1_ratio_and_floor_share(tmp_path):
    rows = [_row(1, 1.5), _row(8, 0.8), _row(32, error="RuntimeError: persistent layer: error word 0x200003")]
    args = argparse.Namespace(allow_dirty=True)
    path = PL.record(tmp_path, rows, 4.2e12, 1024, "python -m lab bench persistent_layer --ledger X", args)
    data = read_record(path)
    assert {f["name"]: (f["value"], f["unit"]) for f in data["figures"]} == {
        "b1_ratio": (1.5, "x"),
        "b1_floor_pct": (37.5, "%"),
    }
    assert "b1 1.50x (win, 38% of floor)" in data["summary"]
    assert "b32 persistent failed (RuntimeError: persistent layer: error word 0x200003)" in data["summary"]
    assert [r["batch"] for r in data["results"]["batches"]] == [1, 8, 32]
    assert data["rows"] == ["ENGINE-PERSISTENT"]


def test_a_failed_b1_records_no_figures_and_prints_the_failure(tmp_path):
    rows = [_row(1, error="ValueError: persistent layer: hidden 1020 not a multiple of 8")]
    args = argparse.Namespace(allow_dirty=True)
    data = read_record(PL.record(tmp_path, rows, 4.2e12, 1024, "python -m lab bench persistent_layer", args))
    assert data["figures"] == []
    assert "b1 persistent failed (ValueError" in data["summary"]
    text = PL.table(rows, 4.2e12, "test device", 1024)
    assert "persistent FAILED: ValueError: persistent layer: hidden 1020" in text
    assert "31461888 weight bytes over 4.20 TB/s" in text
    assert text.splitlines()[3].split()[:3] == ["1", "30.00", "-"]  # the chain's row stands beside the failure


def test_a_persistent_layer_that_raises_is_reported_beside_the_chains_timing():
    """The real measuring path on the CPU: the chain (the engine's layer) runs and is timed; the persistent layer's
    binding refuses CPU tensors, and the row names that refusal instead of raising."""
    row = PL.measure(1, 16, 2, torch.device("cpu"), torch.bfloat16, 4.2e12, n_sets=1)
    assert row["persistent_error"].startswith("ValueError: x: expected a contiguous CUDA torch.bfloat16 tensor")
    assert row["chain_us"] > 0 and row["chain_floor_pct"] > 0
    assert "ratio" not in row and "persistent_us" not in row
    assert row["timing"].startswith("chain eager, 1 calls/sample (no CUDA graphs on cpu)")
    assert "persistent FAILED: ValueError" in PL.table([row], 4.2e12, "cpu", 16)
