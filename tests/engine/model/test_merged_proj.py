"""Merged q/k/v and gate/up weights: the parts are views into one tensor, loaded once, and the merged
GEMM path (VT_MERGED_PROJ) decodes the same tokens as the separate projections."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from safetensors import safe_open

from engine import flags, kernels
from engine.flags import FlagSnapshot
from engine.model.config import QuantConfig
from engine.model.layers import MergedLinear
from engine.model.loader import load_model
from lab.drive import greedy_tokens

DEFAULTS = FlagSnapshot.defaults()


def test_flag_is_on_after_its_flip() -> None:
    assert flags.FLAGS["VT_MERGED_PROJ"].default is True
    assert flags.FLAGS["VT_MERGED_PROJ"].gates == "MODEL-MERGED-PROJ"


def test_merged_path_is_gpu_only() -> None:
    on = FlagSnapshot.defaults().with_(VT_MERGED_PROJ=True)
    proj = MergedLinear(4, [4, 2, 2], False, torch.float32)
    x, w = torch.ones(1, 4), torch.ones(4)
    assert kernels.norm_qkv.choose(on, x, None, w, 1e-6, proj) == "reference"  # a CPU tensor keeps the reference
    # on a GPU the merged arms come first, gated by the flag; the reference is the separate projections
    assert [a.name for a in kernels.norm_qkv.arms] == ["prologue", "merged", "separate"]
    assert [a.name for a in kernels.norm_mlp.arms] == ["prologue_glu", "prologue", "merged", "separate"]
    assert kernels.ops_gated_by("VT_MERGED_PROJ") == {"norm_qkv", "norm_mlp", "gated_mlp"}
    # a quantized projection has no dense merged weight for the prologue GEMV: it takes the merged arm
    awq = QuantConfig(method="awq", bits=4, group_size=4)
    quant = MergedLinear(4, [8, 8, 8], False, torch.float32, awq)
    prologue = kernels.norm_qkv.arm("prologue")
    assert prologue.supports(x, None, w, 1e-6, proj) and not prologue.supports(x, None, w, 1e-6, quant)


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
    # the GPU route forced on the CPU: each layer op's reference replaced by its fused arm
    for op, arm in (("norm_qkv", "prologue"), ("norm_mlp", "prologue"), ("gated_mlp", "merged")):
        monkeypatch.setattr(kernels.TABLE[op], "reference", partial(kernels.TABLE[op].arm(arm).kernel, DEFAULTS))
    kernels.reset_counts()
    merged = greedy_tokens(path, prompts, 8, torch.float32)
    assert merged == separate
    ran = kernels.counts().ran
    assert ran[("add_rms_norm_linear", "reference")] > 0, "the norm-prologue GEMVs never ran"
    assert ran[("norm_qkv", "reference")] > 0 and ran[("norm_mlp", "reference")] > 0
    assert len(set(sum(separate, []))) > 3, separate  # not one repeated token
