"""Qwen3 dense decoder on the engine's reference ops, with the Hugging Face attribute names."""

from __future__ import annotations

import torch
from torch import nn

from engine import kernels
from engine.flags import FlagSnapshot
from engine.model import parallel
from engine.model.batch import ForwardBatch
from engine.model.config import ModelConfig, QuantConfig
from engine.model.layers import Embedding, Linear, MergedLinear, RMSNorm, make_linear
from engine.model.parallel import spans
from engine.ops.rope import rope_cos_sin


class Qwen3Attention(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        tp = parallel.current()  # this rank's heads (all of them on one device)
        heads, kv = tp.even(config.num_attention_heads, "num_attention_heads"), tp.kv_heads(config.num_key_value_heads)
        self.num_heads = len(heads)
        self.num_kv_heads = len(kv)
        self.head_dim = config.head_dim
        self.scaling = self.head_dim**-0.5
        self.sliding_window = config.sliding_windows[layer_idx]
        self.eps = config.rms_norm_eps
        h, d, bias = config.hidden_size, config.head_dim, config.attention_bias
        # q/k/v side by side: q_proj, k_proj and v_proj are views into qkv_proj's weight
        self.qkv_proj = MergedLinear(
            h, [self.num_heads * d, self.num_kv_heads * d, self.num_kv_heads * d], bias, dtype, config.quant
        )
        kv_rows = (spans(kv, d),)
        parallel.column(self.qkv_proj, (spans(heads, d),), kv_rows, kv_rows)
        self.q_proj, self.k_proj, self.v_proj = self.qkv_proj.parts
        self.o_proj = parallel.row(make_linear(self.num_heads * d, h, bias, dtype, config.quant), (spans(heads, d),))
        # Qwen3 normalises q and k per head before RoPE
        self.q_norm = RMSNorm(d, config.rms_norm_eps, dtype)
        self.k_norm = RMSNorm(d, config.rms_norm_eps, dtype)

    def forward(
        self,
        q: torch.Tensor,  # [tokens, heads * head_dim]: q_proj of the normalised input (kernels.norm_qkv)
        k: torch.Tensor,  # [tokens, kv_heads * head_dim]
        v: torch.Tensor,  # [tokens, kv_heads * head_dim]
        cos_sin: tuple[torch.Tensor, torch.Tensor],
        batch: ForwardBatch,
    ) -> torch.Tensor:  # [tokens, hidden]: after o_proj
        t, flags = q.shape[0], batch.flags
        q = q.view(t, self.num_heads, self.head_dim)
        k = k.view(t, self.num_kv_heads, self.head_dim)
        v = v.view(t, self.num_kv_heads, self.head_dim)
        cos, sin = cos_sin
        k_cache, v_cache = batch.kv_caches[self.layer_idx]
        # q and k norm + RoPE, k and v into the cache: one launch under VT_QKV_ROPE_STORE
        q, k = kernels.qkv_norm_rope_store(
            flags,
            q,
            k,
            v,
            self.q_norm.weight,
            self.k_norm.weight,
            cos,
            sin,
            self.eps,
            k_cache,
            v_cache,
            batch.slot_mapping,
        )
        if batch.is_prefill and batch.device_lens is not None:
            o = self.step_attention(q, k, v, k_cache, v_cache, batch)
        elif batch.is_prefill and batch.prefix_lens is not None and any(batch.prefix_lens):
            assert batch.seq_lens is not None  # ForwardBatch demands them for a prefill
            o = kernels.extend_attention(
                flags,
                q,
                k_cache,
                v_cache,
                batch.block_tables,
                batch.seq_lens,
                batch.prefix_lens,
                self.scaling,
                self.sliding_window,
            )
        elif batch.is_prefill:
            assert batch.seq_lens is not None  # ForwardBatch demands them for a prefill
            o = kernels.prefill_attention(flags, q, k, v, batch.seq_lens, self.scaling, self.sliding_window)
        else:
            assert batch.block_tables is not None and batch.context_lens is not None  # and these for a decode
            o = kernels.paged_decode_attention(
                flags, q, k_cache, v_cache, batch.block_tables, batch.context_lens, self.scaling, self.sliding_window
            )
        return self.o_proj(o.reshape(t, self.num_heads * self.head_dim), flags)

    def step_attention(
        self,
        q: torch.Tensor,  # [tokens, Hq, D]: the step's decode rows first, then its prefill/extend rows
        k: torch.Tensor,  # [tokens, Hkv, D]
        v: torch.Tensor,  # [tokens, Hkv, D]
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        batch: ForwardBatch,
    ) -> torch.Tensor:  # [tokens, Hq, D]
        """A serving step's attention (step_attention with this layer's scale and window)."""
        return step_attention(q, k, v, k_cache, v_cache, batch, self.scaling, self.sliding_window)


def step_attention(
    q: torch.Tensor,  # [tokens, Hq, D]: the step's decode rows first, then its prefill/extend rows
    k: torch.Tensor,  # [tokens, Hkv, D]
    v: torch.Tensor,  # [tokens, Hkv, D]
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    batch: ForwardBatch,
    scale: float,
    window: int | None,
) -> torch.Tensor:  # [tokens, Hq, D]
    """A serving step's attention: the decode rows on the decode kernel, every other row in one varlen
    call (prefill_attention over the new tokens' own K/V when no row has a cached prefix)."""
    flags, nd = batch.flags, batch.num_decode
    assert batch.seq_lens is not None and batch.prefix_lens is not None and batch.block_tables is not None
    parts = []
    if nd:
        assert batch.context_lens is not None  # the decode rows' lengths
        tables = batch.block_tables[:nd]
        parts.append(
            kernels.paged_decode_attention(flags, q[:nd], k_cache, v_cache, tables, batch.context_lens, scale, window)
        )
    if batch.seq_lens:
        lens, pres = batch.seq_lens, batch.prefix_lens
        if any(pres):
            o = kernels.extend_attention(
                flags,
                q[nd:],
                k_cache,
                v_cache,
                batch.block_tables[nd:],
                lens,
                pres,
                scale,
                window,
                device_lens=batch.device_lens,
            )
        else:
            o = kernels.prefill_attention(
                flags, q[nd:], k[nd:], v[nd:], lens, scale, window, device_lens=batch.device_lens
            )
        parts.append(o)
    return parts[0] if len(parts) == 1 else torch.cat(parts)


class Qwen3MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int, dtype: torch.dtype, quant: QuantConfig | None = None) -> None:
        super().__init__()
        part = parallel.current().even(intermediate, "intermediate_size")  # this rank's slice
        n, rows = len(part), (spans(part, 1),)
        # gate and up side by side: one GEMM under VT_MERGED_PROJ (on a GPU), two otherwise
        self.gate_up_proj = parallel.column(MergedLinear(hidden, [n, n], False, dtype, quant), rows, rows)
        self.gate_proj, self.up_proj = self.gate_up_proj.parts
        self.down_proj = parallel.row(make_linear(n, hidden, False, dtype, quant), rows)

    def forward(self, x: torch.Tensor, flags: FlagSnapshot) -> torch.Tensor:  # x: [tokens, hidden]
        return kernels.gated_mlp(flags, x, self)  # merged or separate gate/up: the table's choice

    def down(
        self, gate_up: torch.Tensor, flags: FlagSnapshot
    ) -> torch.Tensor:  # [tokens, 2 * inter] -> [tokens, hidden]
        """SiLU-and-mul then down_proj (a dense down_proj: the table's `silu_mul_linear` op)."""
        if isinstance(self.down_proj, Linear):
            out = kernels.silu_mul_linear(flags, gate_up, self.down_proj.weight, self.down_proj.bias)
            return self.down_proj.reduced(out)
        return self.down_proj(kernels.silu_and_mul(flags, gate_up), flags)


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
        # the layer as one op: its ops in turn (`chain`), or a decode step in one persistent launch
        return kernels.decode_layer(batch.flags, hidden, residual, cos_sin, batch, self)

    def chain(
        self,
        hidden: torch.Tensor,
        residual: torch.Tensor | None,
        cos_sin: tuple[torch.Tensor, torch.Tensor],
        batch: ForwardBatch,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        flags, ln = batch.flags, self.input_layernorm
        # the pre-norm and q/k/v (fused into one GEMV's prologue, merged or separate: the table's choice)
        q, k, v, residual = kernels.norm_qkv(flags, hidden, residual, ln.weight, ln.eps, self.self_attn.qkv_proj)
        hidden = self.self_attn(q, k, v, cos_sin, batch)
        ln = self.post_attention_layernorm
        if not isinstance(self.mlp, Qwen3MLP):  # the MoE block: router and experts after the norm
            hidden, residual = kernels.fused_add_rms_norm(flags, hidden, residual, ln.weight, ln.eps)
            return self.mlp(hidden, flags), residual
        return kernels.norm_mlp(flags, hidden, residual, ln.weight, ln.eps, self.mlp)


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
        # the model as one op: its parts in turn (`chain`), or a decode step in one persistent launch
        return kernels.decode_model(batch.flags, input_ids, positions, batch, self)

    def chain(self, input_ids: torch.Tensor, positions: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        hidden = self.embed_tokens(input_ids, batch.flags)
        cfg = self.config
        cos_sin = rope_cos_sin(positions, cfg.head_dim, cfg.rope_theta, hidden.dtype)
        residual = None
        for layer in self.layers:
            hidden, residual = layer(hidden, residual, cos_sin, batch)
        assert residual is not None  # a model has at least one layer
        hidden, _ = kernels.fused_add_rms_norm(batch.flags, hidden, residual, self.norm.weight, self.norm.eps)
        return hidden


class Qwen3ForCausalLM(nn.Module):
    model_class: type[Qwen3Model] = Qwen3Model

    def __init__(self, config: ModelConfig, dtype: torch.dtype) -> None:
        super().__init__()
        self.config = config
        self.model = self.model_class(config, dtype)
        # vocabulary-parallel: this rank's rows of the head, the logits gathered (parallel.gather_logits)
        _, rows = parallel.vocab_rows(config.vocab_size)
        self.lm_head = Linear(config.hidden_size, rows, False, dtype)
        self.comm = parallel.current().comm
        if self.comm is not None:
            self.lm_head.weight.weight_loader = parallel.vocab_loader(config.vocab_size)  # type: ignore[attr-defined]
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight  # one tensor, loaded once

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        return self.model(input_ids, positions, batch)  # [tokens, hidden]

    def compute_logits(
        self, hidden: torch.Tensor, flags: FlagSnapshot
    ) -> torch.Tensor:  # [rows, hidden] -> [rows, vocab]
        return parallel.gather_logits(self.lm_head(hidden, flags), self.config.vocab_size, self.comm)
