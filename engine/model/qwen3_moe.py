"""Qwen3-MoE: the Qwen3 decoder with a sparse mixture-of-experts MLP, HF attribute names."""

from __future__ import annotations

import torch
from torch import nn

from engine import kernels
from engine.flags import FlagSnapshot
from engine.model import parallel
from engine.model.config import ModelConfig
from engine.model.layers import Linear, new_param
from engine.model.qwen3 import Qwen3DecoderLayer, Qwen3ForCausalLM, Qwen3MLP, Qwen3Model

# checkpoint projection name -> (fused parameter, shard index inside it)
EXPERT_SHARDS = {"gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1), "down_proj": ("down_proj", 0)}


class Qwen3MoeExperts(nn.Module):
    """All experts' weights as two stacked tensors (the transformers 5 fused layout).

    Tensor-parallel: every rank holds every expert's slice `part` of the intermediate size (gate and up rows,
    down columns); the block sums the ranks' outputs once."""

    def __init__(self, num_experts: int, hidden: int, intermediate: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.num_experts = num_experts
        self.part = parallel.current().even(intermediate, "moe_intermediate_size")
        self.full = intermediate
        intermediate = len(self.part)
        self.intermediate = intermediate
        self.gate_up_proj = new_param(num_experts, 2 * intermediate, hidden, dtype=dtype)  # gate rows first
        self.down_proj = new_param(num_experts, hidden, intermediate, dtype=dtype)

    def load_expert_shard(self, name: str, loaded: torch.Tensor, expert: int, proj: str) -> tuple[str, int, int]:
        """Load one per-expert checkpoint tensor (`experts.<e>.<proj>.weight`); returns the piece it filled."""
        param_name, shard = EXPERT_SHARDS[proj]
        if not 0 <= expert < self.num_experts:
            raise ValueError(f"{name}: expert {expert} out of range (num_experts={self.num_experts})")
        param = getattr(self, param_name)
        i = self.intermediate
        target = param[expert, shard * i : (shard + 1) * i] if param_name == "gate_up_proj" else param[expert]
        if self.full != len(self.part) and loaded.shape[-1 if param_name == "down_proj" else 0] == self.full:
            loaded = loaded.narrow(-1 if param_name == "down_proj" else 0, self.part.start, len(self.part))
        if tuple(target.shape) != tuple(loaded.shape):
            raise ValueError(f"{name}: checkpoint shape {tuple(loaded.shape)} != model shape {tuple(target.shape)}")
        with torch.no_grad():
            target.copy_(loaded)
        return param_name, expert, shard

    def forward(
        self,
        x: torch.Tensor,  # [tokens, hidden]
        weights: torch.Tensor,  # [tokens, top_k]
        ids: torch.Tensor,  # [tokens, top_k]
        flags: FlagSnapshot,
    ) -> torch.Tensor:
        return kernels.moe_experts(flags, x, self.gate_up_proj, self.down_proj, weights, ids)


class Qwen3MoeSparseMoeBlock(nn.Module):
    def __init__(self, config: ModelConfig, dtype: torch.dtype) -> None:
        super().__init__()
        self.top_k = config.num_experts_per_tok
        self.norm_topk_prob = config.norm_topk_prob
        self.gate = Linear(config.hidden_size, config.num_experts, False, dtype)  # the router
        self.experts = Qwen3MoeExperts(config.num_experts, config.hidden_size, config.moe_intermediate_size, dtype)
        self.comm = parallel.current().comm  # the ranks' partial expert outputs are summed (tensor parallel)

    def forward(self, x: torch.Tensor, flags: FlagSnapshot) -> torch.Tensor:  # x: [tokens, hidden]
        router_logits = self.gate(x, flags)  # [tokens, num_experts]
        weights, ids = kernels.moe_route(flags, router_logits, self.top_k, self.norm_topk_prob, x.dtype)
        out = self.experts(x, weights, ids, flags)
        return out if self.comm is None else self.comm.all_reduce(out)


class Qwen3MoeDecoderLayer(Qwen3DecoderLayer):
    def make_mlp(self, config: ModelConfig, layer_idx: int, dtype: torch.dtype) -> nn.Module:
        if config.layer_is_sparse(layer_idx):
            return Qwen3MoeSparseMoeBlock(config, dtype)
        return Qwen3MLP(config.hidden_size, config.intermediate_size, dtype, config.quant)


class Qwen3MoeModel(Qwen3Model):
    layer_class = Qwen3MoeDecoderLayer


class Qwen3MoeForCausalLM(Qwen3ForCausalLM):
    model_class = Qwen3MoeModel
