"""Build a Qwen3 / Qwen3-MoE / Qwen3-Next model from a Hugging Face directory and load its safetensors weights."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import torch

from engine.model.config import ModelConfig, QuantConfig, load_config
from engine.model.layers import QuantLinear
from engine.model.parallel import default_weight_loader
from engine.model.qwen3 import Qwen3ForCausalLM
from engine.model.qwen3_moe import Qwen3MoeExperts, Qwen3MoeForCausalLM
from engine.model.qwen3_next import Qwen3NextForCausalLM

MODEL_CLASSES: dict[str, type[Qwen3ForCausalLM]] = {
    "Qwen3ForCausalLM": Qwen3ForCausalLM,
    "Qwen3MoeForCausalLM": Qwen3MoeForCausalLM,
    "Qwen3NextForCausalLM": Qwen3NextForCausalLM,
}
# the name map at the edge: per-expert checkpoint tensors go to the fused expert parameters
_PER_EXPERT = re.compile(r"^(?P<mod>.*\.mlp\.experts)\.(?P<e>\d+)\.(?P<proj>gate_proj|up_proj|down_proj)\.weight$")
# tensors some checkpoints carry that the engine recomputes, or does not run (Qwen3-Next's multi-token
# prediction head, which transformers skips too)
_IGNORED = re.compile(r"\.rotary_emb\.inv_freq$|^mtp\.")
# the name map at the edge for quantized linears: checkpoint suffix -> QuantLinear's tensor (None: not used,
# e.g. the activation scales of W4A4 NVFP4, which the engine's weight-only dequant does not read)
QUANT_NAMES: dict[str, dict[str, str | None]] = {
    "awq": {"qweight": "qweight", "qzeros": "qzeros", "scales": "scales"},
    "gptq": {"qweight": "qweight", "qzeros": "qzeros", "scales": "scales", "g_idx": "g_idx"},
    "modelopt": {"weight_scale": "block_scales", "weight_scale_2": "global_scale", "input_scale": None},
    "compressed-tensors": {
        "weight_packed": "packed",
        "weight_scale": "block_scales",
        "weight_global_scale": "global_scale",
        "input_global_scale": None,
    },
}
_QUANT_SUFFIXES = {k for names in QUANT_NAMES.values() for k in names}


class LoadError(ValueError):
    """A checkpoint that does not match the model; the message names the tensor."""


def load_model(model_dir: str | Path, dtype: torch.dtype, device: str | torch.device = "cpu") -> Qwen3ForCausalLM:
    config = load_config(model_dir)
    with torch.device(device):
        model = MODEL_CLASSES[config.architecture](config, dtype)
    load_weights(model, iter_checkpoint(model_dir))
    return model.eval()


def iter_checkpoint(model_dir: str | Path) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) for every tensor of a single-file or sharded safetensors checkpoint."""
    # why: the oracle extra; the engine imports without it
    from safetensors import safe_open

    root = Path(model_dir)
    index = root / "model.safetensors.index.json"
    if index.is_file():
        weight_map: dict[str, str] = json.loads(index.read_text())["weight_map"]
        files = sorted(set(weight_map.values()))
    elif (root / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        raise LoadError(f"{root}: no model.safetensors or model.safetensors.index.json")
    for fname in files:
        path = root / fname
        if not path.is_file():
            raise LoadError(f"{path}: shard named in model.safetensors.index.json is missing")
        with safe_open(str(path), framework="pt", device="cpu") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)


def load_weights(model: Qwen3ForCausalLM, tensors: Iterator[tuple[str, torch.Tensor]]) -> None:
    """Load every checkpoint tensor into its parameter; a missing, extra or mis-shaped tensor is an error."""
    config: ModelConfig = model.config
    params = dict(model.named_parameters())  # a tied lm_head is deduplicated away here
    modules = dict(model.named_modules())
    loaded: set[str] = set()
    expert_pieces: dict[str, set[tuple[int, int]]] = {}
    for name, tensor in tensors:
        if _IGNORED.search(name):
            continue
        if name == "lm_head.weight" and config.tie_word_embeddings:
            continue  # tied: the embedding is the head
        prefix, _, suffix = name.rpartition(".")
        module = modules.get(prefix)
        if isinstance(module, QuantLinear) and suffix != "bias":
            key = quant_key(module.quant, suffix, tensor)
            if key is not None:
                try:
                    module.load_tensor(key, tensor, name)
                except ValueError as exc:
                    raise LoadError(str(exc)) from exc
            continue
        if name not in params and suffix in _QUANT_SUFFIXES:
            why = (
                "config.json has no quantization_config"
                if config.quant is None
                else "the engine keeps this module unquantized (MoE experts, the router, lm_head)"
            )
            raise LoadError(f"{name}: a quantized tensor, but {why}")
        m = _PER_EXPERT.match(name)
        if m and isinstance(modules.get(m["mod"]), Qwen3MoeExperts):
            experts: Qwen3MoeExperts = modules[m["mod"]]
            pname, e, shard = experts.load_expert_shard(
                name, tensor.to(experts.down_proj.dtype), int(m["e"]), m["proj"]
            )
            expert_pieces.setdefault(f"{m['mod']}.{pname}", set()).add((e, shard))
            continue
        if name not in params:
            raise LoadError(f"{name}: unexpected tensor in the checkpoint (no such parameter in {config.architecture})")
        try:  # a sharded parameter (tensor parallel) cuts its slice out of the tensor
            getattr(params[name], "weight_loader", default_weight_loader)(params[name], tensor, name)
        except ValueError as exc:
            raise LoadError(str(exc)) from exc
        loaded.add(name)
    for pname, pieces in expert_pieces.items():
        shards = 2 if pname.endswith("gate_up_proj") else 1
        want = {(e, s) for e in range(config.num_experts) for s in range(shards)}
        if pieces != want:
            e, s = min(want - pieces)
            proj = "down_proj" if shards == 1 else ("gate_proj", "up_proj")[s]
            raise LoadError(f"{pname.rsplit('.', 1)[0]}.{e}.{proj}.weight: missing from the checkpoint")
        loaded.add(pname)
    for prefix, module in modules.items():
        if isinstance(module, QuantLinear):
            try:
                module.finish_loading(prefix)
            except ValueError as exc:
                raise LoadError(str(exc)) from exc
    missing = sorted(set(params) - loaded)
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise LoadError(f"{missing[0]}: missing from the checkpoint{more}")


def quant_key(quant: QuantConfig, suffix: str, tensor: torch.Tensor) -> str | None:
    """QuantLinear's name for a checkpoint tensor `<module>.<suffix>`; an unknown suffix passes through (and
    the layer names it in its error). ModelOpt calls both its packed weight and a dense one `weight`."""
    if suffix == "weight":
        return "packed" if quant.layout == "modelopt" and tensor.dtype == torch.uint8 else "weight"
    names = QUANT_NAMES[quant.layout or quant.method]
    return names.get(suffix, suffix)
