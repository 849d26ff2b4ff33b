"""`python -m engine`: generate, the gate subcommands, lazy kernels/bench dispatch, --help and errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from engine.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_module_entry_generates_json_with_the_embedded_model() -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine",
            "generate",
            "--prompt-ids",
            "1,2,3",
            "--prompt-ids",
            "7",
            "--max-new-tokens",
            "5",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    payload = json.loads(out.stdout)
    assert set(payload) == {"tokens", "texts", "finish_reasons", "tok_per_s"}
    # [1, 2, 3] greedily reaches the embedded model's EOS (492) as its 4th token: the request stops there
    assert [len(t) for t in payload["tokens"]] == [4, 5] and payload["tok_per_s"] > 0
    assert payload["tokens"][0][-1] == 492 and payload["finish_reasons"] == ["stop", "length"]


def test_batch_repeats_one_prompt_identically(capsys) -> None:
    assert main(["generate", "--prompt-ids", "4,2", "--batch", "3", "--max-new-tokens", "4", "--json"]) == 0
    tokens = json.loads(capsys.readouterr().out)["tokens"]
    assert len(tokens) == 3 and tokens[0] == tokens[1] == tokens[2]


def test_text_output_and_bfloat16(capsys) -> None:
    assert main(["generate", "--max-new-tokens", "3", "--dtype", "bfloat16"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("[0] ") and len(lines[0][4:].split(",")) == 3
    assert lines[1].startswith("3 tokens, ")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["generate", "--model", str(Path(__file__).parent), "--prompt", "hello"], "--prompt needs a tokenizer in"),
        (["generate", "--temperature", "-1"], "request 0: SamplingParams.temperature=-1.0 must be >= 0"),
        (["generate", "--top-p", "0"], "request 0: SamplingParams.top_p=0.0 must be in (0, 1]"),
        (["generate", "--prompt-ids", "1,x"], "--prompt-ids '1,x': expected comma-separated integers"),
        (["generate", "--prompt-ids", "1,999999"], "token id 999999 outside the vocabulary [0, 512)"),
        (["generate", "--prompt-ids", "1", "--prompt-ids", "2", "--batch", "2"], "--batch N repeats one prompt"),
        (["generate", "--model", "/nonexistent/m"], "/nonexistent/m/config.json: no config.json"),
    ],
)
def test_bad_input_is_a_usage_error(capsys, argv: list[str], message: str) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["generate"],
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
    assert "usage: python -m engine" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, module, rest",
    [
        (["gate", "kernels", "--help"], "engine.gates.kernels", ["--help"]),
        (["gate", "kernels", "--case", "norm"], "engine.gates.kernels", ["--case", "norm"]),
        (["bench", "ab", "--reps", "3"], "engine.bench.ab", ["--reps", "3"]),
        (["gate", "bench", "bandwidth"], "engine.bench.bandwidth", []),
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
    monkeypatch.setitem(sys.modules, "engine.bench.ab", None)  # an import of it raises ModuleNotFoundError
    assert main(["bench", "ab"]) == 2
    assert "engine.bench.ab is not available" in capsys.readouterr().err


def test_gate_tokens_prints_the_table_and_verdict(capsys) -> None:
    assert main(["gate", "tokens", "--prompt-ids", "5,6,7", "--max-new-tokens", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["prompt", "prompt_len", "new_tokens", "first_divergence", "ours", "oracle"]
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
    from engine.gates import harness

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

    from engine.gates.goldens import GOLDENS_DIR

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["gate", "goldens", "--golden", str(GOLDENS_DIR / "tiny-qwen3-bfloat16-cuda.json")]) == 1
    assert "none was checked" in capsys.readouterr().err


def test_text_in_and_out_with_sampling_flags(capsys) -> None:
    argv = [
        "generate",
        "--prompt",
        "Hello, world!",
        "--prompt",
        "Once upon a time",
        "--temperature",
        "0.8",
        "--top-k",
        "50",
        "--top-p",
        "0.9",
        "--seed",
        "7",
        "--max-tokens",
        "6",
        "--ignore-eos",
        "--json",
    ]
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    assert [len(t) for t in first["tokens"]] == [6, 6] and all(isinstance(t, str) for t in first["texts"])
    assert first["finish_reasons"] == ["length", "length"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["tokens"] == first["tokens"]  # the seed reproduces the sample
    assert main([*argv[:-5], "8", *argv[-4:]]) == 0
    assert json.loads(capsys.readouterr().out)["tokens"] != first["tokens"]


def test_cuda_without_a_device_is_a_usage_error(capsys) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the error path needs a machine without one")
    assert main(["generate", "--device", "cuda"]) == 2
    assert "device 'cuda': no CUDA device is available to torch" in capsys.readouterr().err


def test_text_prompt_with_a_tokenizer_in_the_model_dir(tiny_model_dir, tmp_path, capsys) -> None:
    import shutil

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    d = shutil.copytree(tiny_model_dir, tmp_path / "m")
    words = Tokenizer(models.WordLevel({"[UNK]": 0, **{f"w{i}": i for i in range(1, 512)}}, unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=words, unk_token="[UNK]").save_pretrained(d)
    assert main(["generate", "--model", str(d), "--prompt", "w4 w2", "--max-new-tokens", "3"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert main(["generate", "--prompt-ids", "4,2", "--max-new-tokens", "3", "--json"]) == 0
    ids = json.loads(capsys.readouterr().out)["tokens"][0]
    assert first == f"[0] {','.join(map(str, ids))}  {' '.join(f'w{i}' for i in ids)!r}"
