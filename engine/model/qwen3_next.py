"""Qwen3-Next: gated delta net and gated full-attention layers, MoE with a sigmoid-gated shared expert; HF names.

Every layer is either a gated delta net (`linear_attn`, a recurrence with a per-sequence state the runner
holds in a `RecurrentState`) or full attention (`self_attn`, over the paged KV cache) as
`config.gdn.layer_types` says. The norms are zero-centred (scale 1 + weight), except the gated norm on
the delta net's output. Each op runs through the kernel table (engine/kernels/).
"""

from __future__ import annotations

import torch
from torch import nn

from engine import kernels
from engine.flags import FlagSnapshot
from engine.model import parallel
from engine.model.batch import ForwardBatch
from engine.model.config import GDNConfig, ModelConfig
from engine.model.layers import Embedding, Linear, RMSNorm, make_linear, new_param
from engine.model.parallel import spans
from engine.model.qwen3 import Qwen3ForCausalLM, Qwen3MLP, Qwen3Model, step_attention
from engine.model.qwen3_moe import Qwen3MoeSparseMoeBlock
from engine.ops.rope import rope_cos_sin

CHUNK_SIZE = 64  # tokens per chunk of the chunked prefill (Hugging Face's torch_chunk_gated_delta_rule default)
L2NORM_EPS = 1e-6  # the l2norm of q and k inside the recurrence (Hugging Face's and FLA's)


class RecurrentState:
    """Each gated delta net layer's state for `slots` sequences: the runner owns it beside the KV cache.

    conv[layer]: [slots, conv_dim, kernel] in the model dtype, the last `kernel` inputs of the convolution,
    oldest first; ssm[layer]: [slots, value_heads, key_head_dim, value_head_dim] fp32. The last slot is
    scratch: padded decode rows read and write it.
    """

    def __init__(self, config: ModelConfig, slots: int, dtype: torch.dtype, device: torch.device) -> None:
        gdn = config.gdn
        assert gdn is not None  # only Qwen3-Next configs build one
        self.slots = slots
        self.scratch = slots - 1
        layers = [i for i in range(config.num_hidden_layers) if gdn.is_linear(i)]
        conv = (slots, gdn.conv_dim, gdn.conv_kernel)
        ssm = (slots, gdn.num_value_heads, gdn.key_head_dim, gdn.value_head_dim)
        self.conv = {i: torch.zeros(conv, dtype=dtype, device=device) for i in layers}
        self.ssm = {i: torch.zeros(ssm, dtype=torch.float32, device=device) for i in layers}

    def copy(self) -> RecurrentState:
        """A snapshot of every tensor (the runner puts it back after a capture's warm-up step)."""
        other = object.__new__(RecurrentState)
        other.slots, other.scratch = self.slots, self.scratch
        other.conv = {i: t.clone() for i, t in self.conv.items()}
        other.ssm = {i: t.clone() for i, t in self.ssm.items()}
        return other

    def load(self, other: RecurrentState) -> None:
        """Copy `other`'s values in place: the tensors keep their addresses, which captured graphs read."""
        for mine, theirs in ((self.conv, other.conv), (self.ssm, other.ssm)):
            for i, t in mine.items():
                t.copy_(theirs[i])

    def clear(self, slot: int) -> None:
        """Forget a sequence: its next prefill starts from zeros."""
        for t in (*self.conv.values(), *self.ssm.values()):
            t[slot].zero_()


def make_recurrent_state(
    config: ModelConfig, slots: int, dtype: torch.dtype, device: torch.device
) -> RecurrentState | None:
    """The recurrent state a model of this config needs for `slots` sequences (plus scratch), or None."""
    return None if config.gdn is None else RecurrentState(config, slots + 1, dtype, device)


class Qwen3NextRMSNorm(RMSNorm):
    """Zero-centred RMSNorm: the scale is 1 + weight, applied in fp32 before the one rounding."""

    def forward(self, x: torch.Tensor, flags: FlagSnapshot) -> torch.Tensor:  # x: [..., size]
        return kernels.rms_norm_offset(flags, x, self.weight, self.eps)


class Conv1dWeight(nn.Module):
    """Holds the depthwise convolution's `weight` [channels, 1, kernel] under the checkpoint's name."""

    def __init__(self, channels: int, kernel: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = new_param(channels, 1, kernel, dtype=dtype)


class Qwen3NextGatedDeltaNet(nn.Module):
    """The linear-attention token mixer: projections, short causal convolution, gated delta rule, gated norm."""

    def __init__(self, config: ModelConfig, layer_idx: int, dtype: torch.dtype) -> None:
        super().__init__()
        full = config.gdn
        assert full is not None
        tp = parallel.current()  # tensor parallel: this rank's key heads, each with its value heads
        keys = tp.even(full.num_key_heads, "linear_num_key_heads")
        gdn: GDNConfig = parallel.local_gdn(full, tp) if tp.size > 1 else full
        self.gdn = gdn
        self.layer_idx = layer_idx
        nk, nv, dk, dv = gdn.num_key_heads, gdn.num_value_heads, gdn.key_head_dim, gdn.value_head_dim
        self.key_dim, self.value_dim = nk * dk, nv * dv
        self.eps = config.rms_norm_eps
        h, per = config.hidden_size, nv // nk
        values = range(keys.start * per, keys.stop * per)
        # per key head: q, k, then the v and z of its value heads (Hugging Face's grouped layout)
        qkvz = make_linear(h, 2 * self.key_dim + 2 * self.value_dim, False, dtype, config.quant)
        self.in_proj_qkvz = parallel.column(qkvz, (spans(keys, 2 * dk + 2 * per * dv),))
        ba = make_linear(h, 2 * nv, False, dtype, config.quant)  # per key head: b, then a
        self.in_proj_ba = parallel.column(ba, (spans(keys, 2 * per),))
        self.conv1d = Conv1dWeight(gdn.conv_dim, gdn.conv_kernel, dtype)
        self.dt_bias = new_param(nv, dtype=dtype)
        self.A_log = new_param(nv, dtype=dtype)
        if tp.size > 1:  # the convolution's channels are q, k, v of every head, each block cut to this rank's
            full_key = full.num_key_heads * dk
            conv = (spans(keys, dk), spans(keys, dk, full_key), spans(values, dv, 2 * full_key))
            self.conv1d.weight.weight_loader = parallel.slicer(0, conv)  # type: ignore[attr-defined]
            for p in (self.dt_bias, self.A_log):
                p.weight_loader = parallel.slicer(0, (spans(values, 1),))  # type: ignore[attr-defined]
        self.norm = RMSNorm(dv, config.rms_norm_eps, dtype)  # the gated norm's plain weight
        out = make_linear(self.value_dim, h, False, dtype, config.quant)
        self.out_proj = parallel.row(out, (spans(values, dv),))

    def forward(self, hidden: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:  # [tokens, hidden]
        flags, g = batch.flags, self.gdn
        t = hidden.shape[0]
        nk, nv, dk, dv = g.num_key_heads, g.num_value_heads, g.key_head_dim, g.value_head_dim
        per = nv // nk
        qkvz = self.in_proj_qkvz(hidden, flags).view(t, nk, 2 * dk + 2 * per * dv)
        q, k, v, z = qkvz.split([dk, dk, per * dv, per * dv], dim=-1)
        b, a = self.in_proj_ba(hidden, flags).view(t, nk, 2 * per).split([per, per], dim=-1)
        mixed = torch.cat([q.reshape(t, -1), k.reshape(t, -1), v.reshape(t, -1)], dim=-1)  # [tokens, conv_dim]
        decay, beta = kernels.gdn_gating(flags, a.reshape(t, nv), b.reshape(t, nv), self.A_log, self.dt_bias)
        nd = batch.num_decode
        if batch.is_prefill and nd:  # a serving step: its decode rows first, then prefill chunks
            head = self._decode(mixed[:nd], decay[:nd], beta[:nd], batch)
            core = torch.cat([head, self._prefill(mixed[nd:], decay[nd:], beta[nd:], batch)]) if t > nd else head
        elif batch.is_prefill:
            core = self._prefill(mixed, decay, beta, batch)
        else:
            core = self._decode(mixed, decay, beta, batch)
        normed = kernels.gated_rms_norm(
            flags, core.reshape(t * nv, dv), z.reshape(t * nv, dv), self.norm.weight, self.eps
        )
        return self.out_proj(normed.view(t, nv * dv), flags)

    def _split(self, mixed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[..., conv_dim] -> q, k [..., key_heads, dk] and v [..., value_heads, dv]."""
        g = self.gdn
        q, k, v = mixed.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        lead = mixed.shape[:-1]
        return (
            q.reshape(*lead, g.num_key_heads, g.key_head_dim),
            k.reshape(*lead, g.num_key_heads, g.key_head_dim),
            v.reshape(*lead, g.num_value_heads, g.value_head_dim),
        )

    def _prefill(
        self,
        mixed: torch.Tensor,  # [tokens, conv_dim], sequences back to back
        decay: torch.Tensor,  # [tokens, value_heads] fp32
        beta: torch.Tensor,  # [tokens, value_heads]
        batch: ForwardBatch,
    ) -> torch.Tensor:  # [tokens, value_heads, dv]
        """Each sequence from its state (zeros at token 0, else its slot's: a chunk continuing its prompt),
        writing the state back."""
        flags, state, layer = batch.flags, batch.recurrent, self.layer_idx
        assert state is not None and batch.state_slots is not None and batch.seq_lens is not None
        prefix = batch.prefix_lens or [0] * len(batch.seq_lens)
        weight = self.conv1d.weight[:, 0, :]
        outs, start = [], 0
        for n, slot, cached in zip(batch.seq_lens, batch.state_slots, prefix):
            span = slice(start, start + n)
            conv_in = state.conv[layer][slot] if cached else None
            conv_out, conv_state = kernels.causal_conv1d(flags, mixed[span], weight, conv_in)
            q, k, v = (x[None] for x in self._split(conv_out))  # [1, n, heads, d]
            ssm = state.ssm[layer][slot : slot + 1] if cached else torch.zeros_like(state.ssm[layer][:1])
            out, ssm_new = kernels.gated_delta_chunked(
                flags,
                q,
                k,
                v,
                decay[None, span],
                beta[None, span],
                ssm,
                CHUNK_SIZE,
                scale=self.gdn.key_head_dim**-0.5,
                use_qk_l2norm=True,
                eps=L2NORM_EPS,
            )
            state.conv[layer][slot].copy_(conv_state)
            state.ssm[layer][slot].copy_(ssm_new[0])
            outs.append(out[0])
            start += n
        return torch.cat(outs, dim=0)

    def _decode(
        self,
        mixed: torch.Tensor,  # [batch, conv_dim], one token per sequence
        decay: torch.Tensor,  # [batch, value_heads] fp32
        beta: torch.Tensor,  # [batch, value_heads]
        batch: ForwardBatch,
    ) -> torch.Tensor:  # [batch, value_heads, dv]
        """One token per sequence, device tensors only (capturable): gather each row's state, step, scatter back."""
        flags, state, layer, idx = batch.flags, batch.recurrent, self.layer_idx, batch.state_index
        assert state is not None and idx is not None
        conv_in = state.conv[layer].index_select(0, idx)
        conv_out, conv_state = kernels.causal_conv1d_update(flags, mixed, self.conv1d.weight[:, 0, :], conv_in)
        state.conv[layer].index_copy_(0, idx, conv_state)
        q, k, v = self._split(conv_out)
        out, ssm_new = kernels.gated_delta_decode(
            flags,
            q.contiguous(),
            k.contiguous(),
            v.contiguous(),
            decay,
            beta,
            state.ssm[layer].index_select(0, idx),
            scale=self.gdn.key_head_dim**-0.5,
            use_qk_l2norm=True,
            eps=L2NORM_EPS,
        )
        state.ssm[layer].index_copy_(0, idx, ssm_new)
        return out


class Qwen3NextAttention(nn.Module):
    """Full attention with an output gate (q_proj yields each head's query and gate), zero-centred q/k norms and
    RoPE on the first head_dim * partial_rotary_factor dims."""

    def __init__(self, config: ModelConfig, layer_idx: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        tp = parallel.current()  # this rank's heads (all of them on one device)
        heads, kv = tp.even(config.num_attention_heads, "num_attention_heads"), tp.kv_heads(config.num_key_value_heads)
        self.num_heads = len(heads)
        self.num_kv_heads = len(kv)
        self.head_dim = d = config.head_dim
        self.scaling = d**-0.5
        self.eps = config.rms_norm_eps
        h, bias, quant = config.hidden_size, config.attention_bias, config.quant
        q = make_linear(h, self.num_heads * d * 2, bias, dtype, quant)  # per head: query, then gate
        self.q_proj = parallel.column(q, (spans(heads, 2 * d),))
        self.k_proj = parallel.column(make_linear(h, self.num_kv_heads * d, bias, dtype, quant), (spans(kv, d),))
        self.v_proj = parallel.column(make_linear(h, self.num_kv_heads * d, bias, dtype, quant), (spans(kv, d),))
        self.o_proj = parallel.row(make_linear(self.num_heads * d, h, bias, dtype, quant), (spans(heads, d),))
        self.q_norm = Qwen3NextRMSNorm(d, config.rms_norm_eps, dtype)
        self.k_norm = Qwen3NextRMSNorm(d, config.rms_norm_eps, dtype)

    def forward(
        self,
        hidden: torch.Tensor,  # [tokens, hidden]
        cos_sin: tuple[torch.Tensor, torch.Tensor],  # each [tokens, rotary_dim]
        batch: ForwardBatch,
    ) -> torch.Tensor:
        t, flags, d = hidden.shape[0], batch.flags, self.head_dim
        q, gate = self.q_proj(hidden, flags).view(t, self.num_heads, 2 * d).chunk(2, dim=-1)
        q = self.q_norm(q, flags)
        k = self.k_norm(self.k_proj(hidden, flags).view(t, self.num_kv_heads, d), flags)
        v = self.v_proj(hidden, flags).view(t, self.num_kv_heads, d)
        q, k = _partial_rope(flags, q, cos_sin), _partial_rope(flags, k, cos_sin)
        o = attend(q, k, v, self.layer_idx, self.scaling, batch)
        o = kernels.sigmoid_gate(flags, o.reshape(t, self.num_heads * d), gate.reshape(t, self.num_heads * d))
        return self.o_proj(o, flags)


def _partial_rope(
    flags: FlagSnapshot, x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:  # x: [tokens, heads, head_dim]
    cos, sin = cos_sin
    rot = cos.shape[-1]
    turned = kernels.apply_rope_neox(flags, x[..., :rot].contiguous(), cos, sin)
    return turned if rot == x.shape[-1] else torch.cat([turned, x[..., rot:]], dim=-1)


def attend(
    q: torch.Tensor,  # [tokens, heads, head_dim]
    k: torch.Tensor,  # [tokens, kv_heads, head_dim]
    v: torch.Tensor,  # [tokens, kv_heads, head_dim]
    layer: int,
    scale: float,
    batch: ForwardBatch,
) -> torch.Tensor:  # [tokens, heads, head_dim]
    """Store this step's K/V in the paged cache, then attend: prefill (from the cache where a prefix is cached)
    or one decode token per sequence."""
    flags = batch.flags
    k_cache, v_cache = batch.kv_caches[layer]
    kernels.store_kv(flags, k, v, k_cache, v_cache, batch.slot_mapping)
    if batch.is_prefill and batch.device_lens is not None:  # a serving step (Runner.run_step)
        return step_attention(q, k, v, k_cache, v_cache, batch, scale, None)
    if batch.is_prefill:
        assert batch.seq_lens is not None
        if batch.prefix_lens is not None and any(batch.prefix_lens):
            return kernels.extend_attention(
                flags, q, k_cache, v_cache, batch.block_tables, batch.seq_lens, batch.prefix_lens, scale, None
            )
        return kernels.prefill_attention(flags, q, k, v, batch.seq_lens, scale, None)
    assert batch.block_tables is not None and batch.context_lens is not None
    return kernels.paged_decode_attention(
        flags, q, k_cache, v_cache, batch.block_tables, batch.context_lens, scale, None
    )


class Qwen3NextSparseMoeBlock(Qwen3MoeSparseMoeBlock):
    """The routed experts (Qwen3-MoE's block) plus a shared expert gated by sigmoid(shared_expert_gate(x))."""

    def __init__(self, config: ModelConfig, dtype: torch.dtype) -> None:
        super().__init__(config, dtype)
        h = config.hidden_size
        self.shared_expert = Qwen3MLP(h, config.shared_expert_intermediate_size, dtype, config.quant)
        self.shared_expert_gate = Linear(h, 1, False, dtype)

    def forward(self, x: torch.Tensor, flags: FlagSnapshot) -> torch.Tensor:  # x: [tokens, hidden]
        shared = self.shared_expert(x, flags)
        routed = super().forward(x, flags)
        return routed + kernels.sigmoid_gate(flags, shared, self.shared_expert_gate(x, flags))


class Qwen3NextDecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer_idx: int, dtype: torch.dtype) -> None:
        super().__init__()
        assert config.gdn is not None
        self.linear = config.gdn.is_linear(layer_idx)
        self.linear_attn: Qwen3NextGatedDeltaNet | None = None
        self.self_attn: Qwen3NextAttention | None = None
        if self.linear:
            self.linear_attn = Qwen3NextGatedDeltaNet(config, layer_idx, dtype)
        else:
            self.self_attn = Qwen3NextAttention(config, layer_idx, dtype)
        self.mlp: nn.Module
        if config.layer_is_sparse(layer_idx):
            self.mlp = Qwen3NextSparseMoeBlock(config, dtype)
        else:
            self.mlp = Qwen3MLP(config.hidden_size, config.intermediate_size, dtype, config.quant)
        self.input_layernorm = Qwen3NextRMSNorm(config.hidden_size, config.rms_norm_eps, dtype)
        self.post_attention_layernorm = Qwen3NextRMSNorm(config.hidden_size, config.rms_norm_eps, dtype)

    def forward(
        self,
        hidden: torch.Tensor,  # [tokens, hidden], the residual stream
        cos_sin: tuple[torch.Tensor, torch.Tensor],
        batch: ForwardBatch,
    ) -> torch.Tensor:  # [tokens, hidden]
        flags = batch.flags
        x = self.input_layernorm(hidden, flags)
        if self.linear_attn is not None:
            x = self.linear_attn(x, batch)
        else:
            assert self.self_attn is not None
            x = self.self_attn(x, cos_sin, batch)
        hidden = hidden + x  # the residual sums round to the model dtype, as Hugging Face's
        return hidden + self.mlp(self.post_attention_layernorm(hidden, flags), flags)


class Qwen3NextModel(Qwen3Model):
    """Qwen3Model's interface (embed_tokens, layers, norm) with Qwen3-Next layers; its own constructor, so no Qwen3
    layer is ever allocated."""

    def __init__(self, config: ModelConfig, dtype: torch.dtype) -> None:
        nn.Module.__init__(self)  # not Qwen3Model's: it would build Qwen3 layers
        self.config = config
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size, dtype)
        self.layers = nn.ModuleList(Qwen3NextDecoderLayer(config, i, dtype) for i in range(config.num_hidden_layers))
        self.norm = Qwen3NextRMSNorm(config.hidden_size, config.rms_norm_eps, dtype)
        self.rotary_dim = int(config.head_dim * config.partial_rotary_factor)

    def forward(
        self,
        input_ids: torch.Tensor,  # [tokens]
        positions: torch.Tensor,  # [tokens]
        batch: ForwardBatch,
    ) -> torch.Tensor:  # [tokens, hidden]
        hidden = self.embed_tokens(input_ids, batch.flags)
        cos_sin = rope_cos_sin(positions, self.rotary_dim, self.config.rope_theta, hidden.dtype)
        for layer in self.layers:
            hidden = layer(hidden, cos_sin, batch)
        return self.norm(hidden, batch.flags)


class Qwen3NextForCausalLM(Qwen3ForCausalLM):
    model_class = Qwen3NextModel
