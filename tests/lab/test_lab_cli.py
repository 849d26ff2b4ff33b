"""`python -m lab`: the gate subcommands, lazy kernels/bench dispatch, --help and errors."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
import torch

from lab.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["gate"],
        ["gate", "tokens"],
        ["gate", "neartie"],
        ["gate", "distributional"],
        ["gate", "regen"],
        ["gate", "goldens"],
        ["bench"],
    ],
)
def test_help_everywhere(capsys, argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    assert "usage: python -m lab" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, module, rest",
    [
        (["gate", "kernels", "--help"], "lab.gates.kernels", ["--help"]),
        (["gate", "kernels", "--case", "norm"], "lab.gates.kernels", ["--case", "norm"]),
        (["bench", "ab", "--reps", "3"], "lab.bench.ab", ["--reps", "3"]),
        (["gate", "bench", "bandwidth"], "lab.bench.bandwidth", []),
    ],
)
def test_kernels_and_bench_are_imported_lazily_and_get_argv(monkeypatch, argv, module, rest) -> None:
    seen: list[list[str]] = []
    fake = types.ModuleType(module)
    fake.main = lambda a: seen.append(a) or 3  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module, fake)
    assert main(argv) == 3
    assert seen == [rest]


def test_unknown_bench_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "nosuch"])
    assert exit_.value.code == 2
    assert "invalid choice: 'nosuch'" in capsys.readouterr().err


def test_missing_optional_module_is_a_clear_error(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "lab.bench.ab", None)  # an import of it raises ModuleNotFoundError
    assert main(["bench", "ab"]) == 2
    assert "lab.bench.ab is not available" in capsys.readouterr().err


def test_gate_tokens_prints_the_table_and_verdict(capsys) -> None:
    assert main(["gate", "tokens", "--prompt-ids", "5,6,7", "--max-new-tokens", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["prompt", "prompt_len", "new_tokens", "first_divergence", "ours", "oracle", "ours_digest"]
    assert out[-1] == "tokens: PASS: 4 tokens over 1 prompts equal the oracle's"


def test_gate_neartie_json(capsys) -> None:
    assert main(["gate", "neartie", "--prompt-ids", "9,8", "--max-new-tokens", "3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    # without --dtype: the checkpoint's float32 and bfloat16, each judged
    assert result["verdict"] == "PASS" and [r["dtype"] for r in result["table"]] == ["float32"] * 3 + ["bfloat16"] * 3


def test_gate_neartie_takes_an_out_of_band_allowance(capsys) -> None:
    argv = ["gate", "neartie", "--prompt-ids", "9,8", "--max-new-tokens", "3", "--dtype", "float32"]
    assert main([*argv, "--max-out-of-band-rate", "0.5"]) == 0
    assert "0 out of band (at most 1)" in capsys.readouterr().out  # 3 positions x 0.5, rounded down
    with pytest.raises(SystemExit):
        main([*argv, "--max-out-of-band-rate", "x"])


def test_gate_neartie_fp32_arbiter_builds_a_twin_for_the_rounded_dtypes_only(monkeypatch, capsys) -> None:
    from lab.gates import harness

    built: list[torch.dtype] = []
    real = harness.fp32_twin

    def recording(model_dir, dtype, device):  # type: ignore[no-untyped-def]
        built.append(dtype)
        return real(model_dir, dtype, device)

    monkeypatch.setattr(harness, "fp32_twin", recording)
    argv = ["gate", "neartie", "--prompt-ids", "9,8", "--max-new-tokens", "3", "--json"]
    assert main(argv) == 0 and built == []  # off by default
    capsys.readouterr()
    assert main([*argv, "--fp32-arbiter"]) == 0
    assert built == [torch.bfloat16]  # float32 is its own twin
    assert json.loads(capsys.readouterr().out)["verdict"] == "PASS"


def test_gate_distributional_refuses_on_cpu(capsys) -> None:
    assert main(["gate", "distributional", "--prompt-ids", "9,8", "--max-new-tokens", "3", "--runs", "2"]) == 1
    assert "distributional: REFUSED: the oracle's greedy decoding is deterministic" in capsys.readouterr().out


def test_gate_goldens_checks_committed_files(capsys) -> None:
    assert main(["gate", "goldens"]) == 0
    out = capsys.readouterr().out
    assert "goldens: PASS: tiny-qwen3-float32-cpu.json" in out
    if not __import__("torch").cuda.is_available():
        assert "goldens: SKIP: tiny-qwen3-bfloat16-cuda.json: recorded on a CUDA device" in out


def test_gate_goldens_fails_when_every_golden_is_skipped(capsys, monkeypatch) -> None:
    import torch

    from lab.gates.goldens import GOLDENS_DIR

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["gate", "goldens", "--golden", str(GOLDENS_DIR / "tiny-qwen3-bfloat16-cuda.json")]) == 1
    assert "none was checked" in capsys.readouterr().err
