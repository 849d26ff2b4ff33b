"""The safetensors loader: single and sharded files, tied heads, per-expert and fused MoE layouts, errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.model.loader import LoadError, load_model


def copy_with(src: Path, dst: Path, edit) -> Path:
    """A copy of checkpoint `src` whose tensors pass through `edit(dict) -> dict`."""
    dst.mkdir()
    shutil.copy(src / "config.json", dst / "config.json")
    save_file(edit(load_file(str(src / "model.safetensors"))), str(dst / "model.safetensors"))
    return dst


def assert_same_params(a: torch.nn.Module, b: torch.nn.Module) -> None:
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    assert pa.keys() == pb.keys()
    for k in pa:
        assert torch.equal(pa[k], pb[k]), k


def test_dense_loads_every_tensor_and_ties_the_head(tiny_checkpoint) -> None:
    d = tiny_checkpoint("dense", 3, tie_word_embeddings=True)
    assert "lm_head.weight" not in load_file(str(d / "model.safetensors"))
    model = load_model(d, torch.float32)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    ref = load_file(str(d / "model.safetensors"))
    assert torch.equal(model.model.layers[1].self_attn.k_norm.weight, ref["model.layers.1.self_attn.k_norm.weight"])


def test_bf16_load_converts(tiny_checkpoint) -> None:
    model = load_model(tiny_checkpoint("dense", 0), torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_sharded_checkpoint_loads_the_same(tiny_checkpoint, tmp_path) -> None:
    from transformers import AutoModelForCausalLM

    src = tiny_checkpoint("moe", 0)
    AutoModelForCausalLM.from_pretrained(src).save_pretrained(tmp_path, max_shard_size="40KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert len(list(tmp_path.glob("model-*.safetensors"))) > 2
    assert_same_params(load_model(tmp_path, torch.float32), load_model(src, torch.float32))


def test_fused_expert_layout_loads_like_per_expert(tiny_checkpoint, tmp_path) -> None:
    src = tiny_checkpoint("moe", 0)

    def fuse(t: dict) -> dict:
        out = {}
        for layer in range(2):
            pre = f"model.layers.{layer}.mlp.experts"
            n = sum(1 for k in t if k.startswith(pre) and k.endswith("down_proj.weight"))
            gate_up = [
                torch.cat([t.pop(f"{pre}.{e}.gate_proj.weight"), t.pop(f"{pre}.{e}.up_proj.weight")]) for e in range(n)
            ]
            out[f"{pre}.gate_up_proj"] = torch.stack(gate_up)
            out[f"{pre}.down_proj"] = torch.stack([t.pop(f"{pre}.{e}.down_proj.weight") for e in range(n)])
        return {**t, **out}

    fused = copy_with(src, tmp_path / "fused", fuse)
    assert_same_params(load_model(fused, torch.float32), load_model(src, torch.float32))


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda t: {k: v for k, v in t.items() if k != "model.layers.1.mlp.gate.weight"},
            "model.layers.1.mlp.gate.weight: missing from the checkpoint",
        ),
        (
            lambda t: {k: v for k, v in t.items() if k != "model.layers.0.mlp.experts.3.up_proj.weight"},
            "model.layers.0.mlp.experts.3.up_proj.weight: missing from the checkpoint",
        ),
        (
            lambda t: {**t, "model.layers.0.self_attn.bogus.weight": torch.ones(3)},
            "model.layers.0.self_attn.bogus.weight: unexpected tensor",
        ),
        (
            lambda t: {**t, "model.norm.weight": torch.ones(47)},
            "model.norm.weight: checkpoint shape (47,) != model shape (48,)",
        ),
        (
            lambda t: {**t, "model.layers.1.mlp.experts.0.down_proj.weight": torch.ones(48, 41)},
            "model.layers.1.mlp.experts.0.down_proj.weight: checkpoint shape (48, 41) != model shape (48, 40)",
        ),
    ],
)
def test_bad_checkpoints_name_the_tensor(tiny_checkpoint, tmp_path, edit, message) -> None:
    bad = copy_with(tiny_checkpoint("moe", 0), tmp_path / "bad", edit)
    with pytest.raises(ValueError) as err:
        load_model(bad, torch.float32)
    assert message in str(err.value)


def test_missing_files_are_errors(tiny_checkpoint, tmp_path) -> None:
    d = tmp_path / "empty"
    d.mkdir()
    shutil.copy(tiny_checkpoint("dense", 0) / "config.json", d / "config.json")
    with pytest.raises(LoadError, match="no model.safetensors or model.safetensors.index.json"):
        load_model(d, torch.float32)
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"x": "model-00001.safetensors"}}))
    with pytest.raises(LoadError, match="model-00001.safetensors: shard named in"):
        load_model(d, torch.float32)
