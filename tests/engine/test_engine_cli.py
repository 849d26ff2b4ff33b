"""`python -m engine`: generate, --help and errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
    assert lines[0] == "model: the embedded tiny Qwen3, a toy with random weights: its text is not language"
    ids, _, rest = lines[1][4:].partition("  ")
    assert lines[1].startswith("[0] ") and len(ids.split(",")) == 3
    assert rest.startswith("'") and rest.endswith("'  (finish: length)")  # the decoded text, then why it ended
    assert lines[2].startswith("3 tokens, ")


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
        (
            ["generate", "--prompt-ids", "1,2", "--max-new-tokens", "5000"],
            "a 2-token prompt and --max-tokens 5000 need 5003 positions; the model has 1024 "
            "(max_position_embeddings): pass --max-tokens 1021 or fewer",
        ),
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
    ],
)
def test_help_everywhere(capsys, argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    assert "usage: python -m engine" in capsys.readouterr().out


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
    assert first == f"[0] {','.join(map(str, ids))}  {' '.join(f'w{i}' for i in ids)!r}  (finish: length)"
