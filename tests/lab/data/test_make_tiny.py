"""The embedded tiny model: reproducible from its script, and with clear-cut greedy choices (a gate with teeth)."""

from __future__ import annotations

import torch
from safetensors.torch import load_file

from lab.data import make_tiny


def test_script_rebuilds_the_committed_weights_exactly(tiny_model_dir) -> None:
    committed = load_file(str(tiny_model_dir / "model.safetensors"))
    rebuilt = make_tiny.build().state_dict()
    assert committed.keys() == rebuilt.keys()  # untied: the head is stored
    for name, tensor in committed.items():
        assert torch.equal(tensor, rebuilt[name]), name


def test_top1_top2_gap_is_usually_large() -> None:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    model = make_tiny.build()
    assert make_tiny.median_gap(model, model.config.vocab_size) > 2.0
    # the same architecture at transformers' own init is nearly flat: what the scaling is for
    torch.manual_seed(0)
    default = Qwen3ForCausalLM(Qwen3Config(**make_tiny.CONFIG)).eval()
    assert make_tiny.median_gap(default, default.config.vocab_size) < 0.5


def test_embedded_model_ships_a_tokenizer_transformers_reads(tiny_model_dir) -> None:
    import json

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    text = "Hello, world! def main(argv): return 0"
    assert tok.decode(tok(text)["input_ids"]) == text  # byte-level: any text round-trips
    eos = json.loads((tiny_model_dir / "generation_config.json").read_text())["eos_token_id"]
    assert (
        tok.eos_token_id == eos and len(tok) <= json.loads((tiny_model_dir / "config.json").read_text())["vocab_size"]
    )
