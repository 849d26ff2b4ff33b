"""Qwen3 dense decoder on the engine's reference ops, with the Hugging Face attribute names."""
from __future__ import annotations

import torch
from torch import nn

from engine import flags
from engine.model.batch import ForwardBatch
from engine.model.config import ModelConfig, QuantConfig
from engine.model.layers import Embedding, Linear, MergedLinear, RMSNorm, make_linear
from engine.ops.activation import silu_and_mul
from engine.ops.attention import extend_attention, paged_decode_attention, prefill_attention
from engine.ops.kv_cache import store_kv
from engine.ops.norm import fused_add_rms_norm
from engine.ops.rope import qk_norm_rope, rope_cos_sin
from engine.ops.sampling import greedy_argmax


def merged_projections(x: torch.Tensor) -> bool:
    """One GEMM for q/k/v and one for gate/up (VT_MERGED_PROJ, GPU only): other GEMM shapes than the
    separate products, so the summation order, and the rounding, may differ from Hugging Face's."""
    return x.is_cuda and flags.enabled("VT_MERGED_PROJ") and flags.enabled("VT_KERNELS")


class Qwen3Attention(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.scaling = self.head_dim ** -0.5
        self.sliding_window = config.sliding_windows[layer_idx]
        self.eps = config.rms_norm_eps
        h, d, bias = config.hidden_size, config.head_dim, config.attention_bias
        # q/k/v side by side: q_proj, k_proj and v_proj are views into qkv_proj's weight
        self.qkv_proj = MergedLinear(h, [self.num_heads * d, self.num_kv_heads * d, self.num_kv_heads * d], bias,
                                     dtype, config.quant)
        self.q_proj, self.k_proj, self.v_proj = self.qkv_proj.parts
        self.o_proj = make_linear(self.num_heads * d, h, bias, dtype, config.quant)
        # Qwen3 normalises q and k per head before RoPE
        self.q_norm = RMSNorm(d, config.rms_norm_eps, dtype)
        self.k_norm = RMSNorm(d, config.rms_norm_eps, dtype)

    def forward(
        self,
        hidden: torch.Tensor,  # [tokens, hidden]
        cos_sin: tuple[torch.Tensor, torch.Tensor],  # each [tokens, head_dim]
        batch: ForwardBatch,
    ) -> torch.Tensor:
        t = hidden.shape[0]
        if merged_projections(hidden):
            q, k, v = self.qkv_proj(hidden).split(self.qkv_proj.sizes, dim=-1)
        else:
            q, k, v = self.q_proj(hidden), self.k_proj(hidden), self.v_proj(hidden)
        q = q.view(t, self.num_heads, self.head_dim)
        k = k.view(t, self.num_kv_heads, self.head_dim)
        v = v.view(t, self.num_kv_heads, self.head_dim)
        cos, sin = cos_sin
        q = qk_norm_rope(q, self.q_norm.weight, cos, sin, self.eps)  # one fused launch under VT_QK_NORM_ROPE_FUSED
        k = qk_norm_rope(k, self.k_norm.weight, cos, sin, self.eps)
        k_cache, v_cache = batch.kv_caches[self.layer_idx]
        store_kv(k, v, k_cache, v_cache, batch.slot_mapping)
        if batch.is_prefill and batch.prefix_lens is not None and any(batch.prefix_lens):
            o = extend_attention(q, k_cache, v_cache, batch.block_tables, batch.seq_lens, batch.prefix_lens,
                                 self.scaling, self.sliding_window)
        elif batch.is_prefill:
            o = prefill_attention(q, k, v, batch.seq_lens, self.scaling, self.sliding_window)
        else:
            o = paged_decode_attention(q, k_cache, v_cache, batch.block_tables, batch.context_lens,
                                       self.scaling, self.sliding_window)
        return self.o_proj(o.reshape(t, self.num_heads * self.head_dim))


class Qwen3MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int, dtype: torch.dtype, quant: QuantConfig | None = None) -> None:
        super().__init__()
        # gate and up side by side: one GEMM under VT_MERGED_PROJ (on a GPU), two otherwise
        self.gate_up_proj = MergedLinear(hidden, [intermediate, intermediate], False, dtype, quant)
        self.gate_proj, self.up_proj = self.gate_up_proj.parts
        self.down_proj = make_linear(intermediate, hidden, False, dtype, quant)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [tokens, hidden]
        if merged_projections(x):
            gate_up = self.gate_up_proj(x)
        else:
            gate_up = torch.cat([self.gate_proj(x), self.up_proj(x)], dim=-1)
        return self.down_proj(silu_and_mul(gate_up))


class Qwen3DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.self_attn = Qwen3Attention(config, layer_idx, dtype)
        self.mlp = self.make_mlp(config, layer_idx, dtype)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, dtype)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, dtype)

    def make_mlp(self, config: ModelConfig, layer_idx: int, dtype: torch.dtype) -> nn.Module:
        return Qwen3MLP(config.hidden_size, config.intermediate_size, dtype, config.quant)

    def forward(
        self,
        hidden: torch.Tensor,  # [tokens, hidden]: this layer's input delta (the embedding for layer 0)
        residual: torch.Tensor | None,  # [tokens, hidden]: the running sum before `hidden` is added
        cos_sin: tuple[torch.Tensor, torch.Tensor],
        batch: ForwardBatch,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ln = self.input_layernorm
        if residual is None:
            residual, hidden = hidden, ln(hidden)
        else:
            hidden, residual = fused_add_rms_norm(hidden, residual, ln.weight, ln.eps)
        hidden = self.self_attn(hidden, cos_sin, batch)
        ln = self.post_attention_layernorm
        hidden, residual = fused_add_rms_norm(hidden, residual, ln.weight, ln.eps)
        return self.mlp(hidden), residual


class Qwen3Model(nn.Module):
    layer_class: type[Qwen3DecoderLayer] = Qwen3DecoderLayer

    def __init__(self, config: ModelConfig, dtype: torch.dtype) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size, dtype)
        self.layers = nn.ModuleList(self.layer_class(config, i, dtype) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, dtype)

    def forward(
        self,
        input_ids: torch.Tensor,  # [tokens]
        positions: torch.Tensor,  # [tokens]
        batch: ForwardBatch,
    ) -> torch.Tensor:  # [tokens, hidden]
        hidden = self.embed_tokens(input_ids)
        cfg = self.config
        cos_sin = rope_cos_sin(positions, cfg.head_dim, cfg.rope_theta, hidden.dtype)
        residual = None
        for layer in self.layers:
            hidden, residual = layer(hidden, residual, cos_sin, batch)
        hidden, _ = fused_add_rms_norm(hidden, residual, self.norm.weight, self.norm.eps)
        return hidden


class Qwen3ForCausalLM(nn.Module):
    model_class: type[Qwen3Model] = Qwen3Model

    def __init__(self, config: ModelConfig, dtype: torch.dtype) -> None:
        super().__init__()
        self.config = config
        self.model = self.model_class(config, dtype)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, False, dtype)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight  # one tensor, loaded once

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        return self.model(input_ids, positions, batch)  # [tokens, hidden]

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:  # hidden: [rows, hidden] -> [rows, vocab]
        return self.lm_head(hidden)

    def greedy(self, hidden: torch.Tensor) -> torch.Tensor:  # hidden: [rows, hidden] -> [rows] int64
        return greedy_argmax(self.compute_logits(hidden))
