"""Merged q/k/v and gate/up weights: the parts are views into one tensor, loaded once, and the merged
GEMM path (VT_MERGED_PROJ) decodes the same tokens as the separate projections."""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open

from engine import flags
from engine.flags import FlagSnapshot
from engine.model import qwen3
from engine.model.layers import MergedLinear
from engine.model.loader import load_model
from lab.drive import greedy_tokens


def test_flag_is_on_after_its_flip() -> None:
    assert flags.FLAGS["VT_MERGED_PROJ"].default is True
    assert flags.FLAGS["VT_MERGED_PROJ"].gates == "MODEL-MERGED-PROJ"


def test_merged_path_is_gpu_only() -> None:
    on = FlagSnapshot.defaults().with_(VT_MERGED_PROJ=True)
    assert not qwen3.merged_projections(torch.ones(1, 4), on)  # a CPU tensor keeps the reference path


def test_parts_are_views_of_the_merged_weight() -> None:
    m = MergedLinear(6, [4, 2, 3], True, torch.float32)
    for i, part in enumerate(m.parts):
        part.weight.copy_(torch.full_like(part.weight, i + 1.0))
        part.bias.copy_(torch.full_like(part.bias, -(i + 1.0)))
    assert m.weight[:, 0].tolist() == [1.0] * 4 + [2.0] * 2 + [3.0] * 3
    assert m.bias.tolist() == [-1.0] * 4 + [-2.0] * 2 + [-3.0] * 3
    x = torch.randn(3, 6)
    flags = FlagSnapshot.defaults()
    separate = torch.cat([p(x, flags) for p in m.parts], dim=-1)
    torch.testing.assert_close(m(x, flags), separate)


def test_a_moved_module_refuses_the_merged_gemm() -> None:
    m = MergedLinear(5, [3, 3], False, torch.float32)
    for p in m.parts:  # what Module.to() does: new parameters for the parts, the merged tensor left behind
        p.weight = torch.nn.Parameter(p.weight.detach().clone(), requires_grad=False)
    with pytest.raises(RuntimeError, match="no longer alias the merged weight"):
        m(torch.randn(2, 5), FlagSnapshot.defaults())


def test_loading_a_checkpoint_fills_the_merged_weights(tiny_checkpoint) -> None:
    path = tiny_checkpoint("dense", 0)
    model = load_model(path, torch.float32)
    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        want_qkv = torch.cat([f.get_tensor(f"model.layers.1.self_attn.{p}_proj.weight") for p in "qkv"])
        want_gu = torch.cat([f.get_tensor(f"model.layers.1.mlp.{p}_proj.weight") for p in ("gate", "up")])
    layer = model.model.layers[1]
    torch.testing.assert_close(layer.self_attn.qkv_proj.weight, want_qkv, rtol=0, atol=0)
    torch.testing.assert_close(layer.mlp.gate_up_proj.weight, want_gu, rtol=0, atol=0)
    # the weights are held once: the parameter count is the checkpoint's
    names = {n for n, _ in model.named_parameters()}
    assert "model.layers.1.self_attn.q_proj.weight" in names
    assert not any("qkv_proj" in n or "gate_up_proj" in n for n in names)


def test_merged_path_decodes_the_same_tokens(tiny_checkpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tiny_checkpoint("dense", 1)
    prompts = [[3, 17, 29, 101, 7], [11, 5]]
    separate = greedy_tokens(path, prompts, 8, torch.float32)
    calls = []
    real = MergedLinear.forward

    def counted(self, x, flags):
        calls.append(tuple(x.shape))
        return real(self, x, flags)

    real_norm_linear = qwen3.norm_linear

    def counted_norm_linear(flags, x, residual, norm, proj):  # the pre-norm and a merged GEMM as one op
        calls.append(tuple(x.shape))
        return real_norm_linear(flags, x, residual, norm, proj)

    monkeypatch.setattr(qwen3, "merged_projections", lambda x, flags: True)  # the GPU route, forced on the CPU
    monkeypatch.setattr(MergedLinear, "forward", counted)
    monkeypatch.setattr(qwen3, "norm_linear", counted_norm_linear)
    merged = greedy_tokens(path, prompts, 8, torch.float32)
    assert merged == separate
    assert calls, "the merged GEMMs never ran"
    assert len(set(sum(separate, []))) > 3, separate  # not one repeated token
