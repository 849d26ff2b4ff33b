"""The decoder layer's fusion choices as ops of the table: the whole layer (`decode_layer`), the pre-norm q/k/v
projection (`norm_qkv`), the pre-norm gated MLP (`norm_mlp`) and the gated MLP alone (`gated_mlp`), so the model
calls one op and the table picks how.

`decode_layer`'s arms: `persistent` (VT_PERSISTENT_LAYER, default OFF; a plain decode step of a dense Qwen3 layer
on one GPU: `persistent_refusal`) runs the layer as one persistent launch (engine/cuda/persistent.py), and `chain`
runs the layer's ops in turn (`layer.chain`), each op choosing its own arm under the call's snapshot.

Their arms take the layer's own modules (engine/model/layers.py `MergedLinear`, engine/model/qwen3.py `Qwen3MLP`,
read by attribute: `parts`, `sizes`, `weight`, `bias`, `quantized`, `gate_up_proj`, `down_proj`, `down`), so a
quantized or tensor-parallel projection keeps its own forward (its dequant, its all-reduce). Every arm is composite:
it runs other ops of the table under the call's snapshot (looked up by name, as `by_parts` does), whose counters still name the kernel that ran
(`add_rms_norm_linear/prologue_stream_pdl`). In precedence order:

- `prologue_glu` (VT_MERGED_PROJ, VT_GLU_GEMV; dense gate/up and down): the norm in the gate/up GEMV's prologue and
  the activation in its epilogue (`add_rms_norm_linear_silu_mul`), then the down projection;
- `prologue` (VT_MERGED_PROJ; a dense merged weight): the norm in the merged GEMV's prologue (`add_rms_norm_linear`);
- `merged` (VT_MERGED_PROJ): the norm, then one merged projection (quantized: its parts, concatenated);
- `separate`: the norm, then each projection on its own.

The reference is `separate` with every kernel off (VT_KERNELS=0): today's unfused chain over the references, each
inner op counted as its reference. The composite checks only that x is a tensor; the ops it runs check the rest
(each tensor is checked once, by the op that reads it).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from engine.cuda import persistent
from engine.cuda.device import Device
from engine.cuda.persistent_schedule import LayerShape
from engine.flags import FlagSnapshot
from engine.kernels.table import Arm, Op, call, device_of, gated_by, supports_any
from engine.ops._check import check_tensor
from engine.ops.rope import rope_cos_sin

_UNFUSED = FlagSnapshot.defaults().with_(VT_KERNELS=False)  # the reference: every inner op runs its reference
_MERGED = gated_by("VT_MERGED_PROJ")
Normed = tuple[torch.Tensor, torch.Tensor]  # (the layer's output, the new residual)


def pre_norm(
    flags: FlagSnapshot, x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float
) -> Normed:  # (normed, new residual)
    """`fused_add_rms_norm(x, residual)`, or with no residual (the first layer) `rms_norm(x)` and x as the residual."""
    if residual is None:
        return call("rms_norm", flags, x, weight, eps), x
    return call("fused_add_rms_norm", flags, x, residual, weight, eps)


# --- norm_qkv: the attention's pre-norm and its q/k/v projection -------------------------------------------
QKV = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]  # (q, k, v, new residual)


def _qkv_separate(
    flags: FlagSnapshot, x: torch.Tensor, residual: torch.Tensor | None, norm_w: torch.Tensor, eps: float, proj: Any
) -> QKV:
    h, residual = pre_norm(flags, x, residual, norm_w, eps)
    q, k, v = (part(h, flags) for part in proj.parts)
    return q, k, v, residual


def _qkv_merged(
    flags: FlagSnapshot, x: torch.Tensor, residual: torch.Tensor | None, norm_w: torch.Tensor, eps: float, proj: Any
) -> QKV:
    h, residual = pre_norm(flags, x, residual, norm_w, eps)
    q, k, v = proj(h, flags).split(proj.sizes, dim=-1)
    return q, k, v, residual


def _qkv_prologue(
    flags: FlagSnapshot, x: torch.Tensor, residual: torch.Tensor | None, norm_w: torch.Tensor, eps: float, proj: Any
) -> QKV:
    qkv, residual = call("add_rms_norm_linear", flags, x, residual, norm_w, eps, proj.weight, proj.bias)
    q, k, v = qkv.split(proj.sizes, dim=-1)
    return q, k, v, residual


def norm_qkv(
    x: torch.Tensor,  # [tokens, hidden]: the layer's input delta (the embedding for layer 0)
    residual: torch.Tensor | None,  # [tokens, hidden]: the running sum before x is added; None before layer 0
    norm_weight: torch.Tensor,  # [hidden]: input_layernorm's
    eps: float,
    proj: Any,  # the attention's MergedLinear of q, k and v
) -> QKV:  # q [tokens, Hq * D], k and v [tokens, Hkv * D], the new residual [tokens, hidden]
    """The attention's pre-norm, then q_proj, k_proj and v_proj, each on its own, every kernel off."""
    return _qkv_separate(_UNFUSED, x, residual, norm_weight, eps, proj)


def check_x(x: torch.Tensor, *_: Any) -> None:
    check_tensor(x, "x")


def _dense_merged(x: torch.Tensor, residual: torch.Tensor | None, norm_w: torch.Tensor, eps: float, proj: Any) -> bool:
    return not proj.quantized


def _arm(name: str, flags: tuple[str, ...], supports: Any, needs: str, kernel: Any) -> Arm:
    return Arm(name, flags, supports, needs, kernel, composite=True)


_DENSE = "a dense (not quantized) merged weight"
norm_qkv_op = Op(
    norm_qkv,
    check_x,
    [
        _arm("prologue", _MERGED, _dense_merged, _DENSE, _qkv_prologue),
        _arm("merged", _MERGED, supports_any, "any projection", _qkv_merged),
        _arm("separate", gated_by(), supports_any, "any projection", _qkv_separate),
    ],
)


# --- gated_mlp and norm_mlp: the gated MLP, alone and after its pre-norm -------------------------------------
def _mlp_separate(flags: FlagSnapshot, x: torch.Tensor, mlp: Any) -> torch.Tensor:
    gate_up = torch.cat([mlp.gate_proj(x, flags), mlp.up_proj(x, flags)], dim=-1)
    return mlp.down(gate_up, flags)


def _mlp_merged(flags: FlagSnapshot, x: torch.Tensor, mlp: Any) -> torch.Tensor:
    return mlp.down(mlp.gate_up_proj(x, flags), flags)


def gated_mlp(
    x: torch.Tensor,  # [tokens, hidden], normalised
    mlp: Any,  # the Qwen3MLP
) -> torch.Tensor:  # [tokens, hidden]: down_proj(silu(gate_proj(x)) * up_proj(x))
    """The gated MLP with gate_proj and up_proj each on its own, every kernel off."""
    return _mlp_separate(_UNFUSED, x, mlp)


gated_mlp_op = Op(
    gated_mlp,
    check_x,
    [
        _arm("merged", _MERGED, supports_any, "any projection", _mlp_merged),
        _arm("separate", gated_by(), supports_any, "any projection", _mlp_separate),
    ],
)


def _norm_then(
    mlp_arm: Any,
) -> Any:  # the pre-norm, then the gated MLP's arm `mlp_arm`
    def kernel(
        flags: FlagSnapshot, x: torch.Tensor, residual: torch.Tensor | None, norm_w: torch.Tensor, eps: float, mlp: Any
    ) -> Normed:
        h, residual = pre_norm(flags, x, residual, norm_w, eps)
        return mlp_arm(flags, h, mlp), residual

    kernel.__name__ = kernel.__qualname__ = f"norm_then{mlp_arm.__name__}"
    return kernel


def _mlp_prologue(
    flags: FlagSnapshot, x: torch.Tensor, residual: torch.Tensor | None, norm_w: torch.Tensor, eps: float, mlp: Any
) -> Normed:
    gu = mlp.gate_up_proj
    gate_up, residual = call("add_rms_norm_linear", flags, x, residual, norm_w, eps, gu.weight, gu.bias)
    return mlp.down(gate_up, flags), residual


def _mlp_prologue_glu(
    flags: FlagSnapshot, x: torch.Tensor, residual: torch.Tensor | None, norm_w: torch.Tensor, eps: float, mlp: Any
) -> Normed:
    gu = mlp.gate_up_proj
    act, residual = call("add_rms_norm_linear_silu_mul", flags, x, residual, norm_w, eps, gu.weight, gu.bias)
    return mlp.down_proj(act, flags), residual


def norm_mlp(
    x: torch.Tensor,  # [tokens, hidden]: the attention's output
    residual: torch.Tensor | None,  # [tokens, hidden]: the running sum before x is added
    norm_weight: torch.Tensor,  # [hidden]: post_attention_layernorm's
    eps: float,
    mlp: Any,  # the Qwen3MLP
) -> Normed:  # (the MLP's output [tokens, hidden], the new residual [tokens, hidden])
    """The MLP's pre-norm, then the gated MLP with gate_proj and up_proj each on its own, every kernel off."""
    return _norm_then(_mlp_separate)(_UNFUSED, x, residual, norm_weight, eps, mlp)


def _dense_gate_up(x: torch.Tensor, residual: torch.Tensor | None, norm_w: torch.Tensor, eps: float, mlp: Any) -> bool:
    return not mlp.gate_up_proj.quantized


def _dense_mlp(x: torch.Tensor, residual: torch.Tensor | None, norm_w: torch.Tensor, eps: float, mlp: Any) -> bool:
    return not mlp.gate_up_proj.quantized and not mlp.down_proj.quantized


norm_mlp_op = Op(
    norm_mlp,
    check_x,
    [
        _arm(
            "prologue_glu",
            gated_by("VT_MERGED_PROJ", "VT_GLU_GEMV"),
            _dense_mlp,
            "dense gate/up and down weights",
            _mlp_prologue_glu,
        ),
        _arm("prologue", _MERGED, _dense_gate_up, _DENSE, _mlp_prologue),
        _arm("merged", _MERGED, supports_any, "any projection", _norm_then(_mlp_merged)),
        _arm("separate", gated_by(), supports_any, "any projection", _norm_then(_mlp_separate)),
    ],
)


# --- decode_layer: one whole decoder layer ---------------------------------------------------------------------
def decode_layer(
    x: torch.Tensor,  # [tokens, hidden]: the layer's input delta (the embedding for layer 0)
    residual: torch.Tensor | None,  # [tokens, hidden]: the running sum before x is added; None before layer 0
    cos_sin: tuple[torch.Tensor, torch.Tensor],  # [tokens, head_dim] each
    batch: Any,  # the step's ForwardBatch (its kv_caches written in place)
    layer: Any,  # the Qwen3DecoderLayer: `chain` is its ops in turn
) -> Normed:  # (the layer's output delta [tokens, hidden], the new residual [tokens, hidden])
    """The layer's ops in turn (`layer.chain`: norm_qkv, attention, norm_mlp or the MoE block), every kernel off."""
    return layer.chain(x, residual, cos_sin, _with_flags(batch, _UNFUSED))


def _with_flags(batch: Any, flags: FlagSnapshot) -> Any:
    return batch if batch.flags == flags else replace(batch, flags=flags)


def _layer_chain(
    flags: FlagSnapshot, x: torch.Tensor, residual: torch.Tensor | None, cos_sin: Any, batch: Any, layer: Any
) -> Normed:
    return layer.chain(x, residual, cos_sin, _with_flags(batch, flags))


def persistent_refusal(
    x: torch.Tensor, residual: torch.Tensor | None, cos_sin: Any, batch: Any, layer: Any
) -> str | None:
    """Why the persistent layer cannot run this call (None: it can): a plain decode step of a dense, unquantized,
    bias-free Qwen3 layer on one rank, in bf16 or fp16 on a GPU, in the shapes and shared memory the kernel takes."""
    return _refusal(batch, layer, x, x.shape[0], residual is None)


def _refusal(batch: Any, layer: Any, like: torch.Tensor, rows: int, first: bool) -> str | None:
    """`like`: a tensor on the call's device, in its dtype."""
    why = _layer_kind_refusal(batch, layer)
    if why is not None:
        return why
    if not like.is_cuda:
        return f"x on {like.device} (CUDA only)"
    return fit_refusal(layer, rows, first, device_of(like), like.dtype)


def fit_refusal(layer: Any, rows: int, first: bool, device: Device, dtype: torch.dtype) -> str | None:
    """What of the layer's shapes, at `rows` rows, the kernel does not fit on `device` (None: it fits)."""
    a, tile = layer.self_attn, persistent.TILES["qkv_cols"]
    if a.head_dim % tile:  # the schedule's q/k/v tiles would split a head
        return f"head_dim {a.head_dim} not a multiple of the q/k/v tile's {tile} columns"
    s = _persistent_shape(rows, first, layer)
    smem = persistent.smem_bytes(rows, s.hidden, s.heads, s.kv_heads, s.head_dim, s.intermediate, 2)
    lacking = device.lacks((7, 0), smem)  # a block stages up to 8 rows of the widest GEMV input
    if lacking is not None:
        return f"the device: {lacking}"
    return persistent.refusal(persistent.schedule_for(s, 1, 0), persistent.BUILT, dtype)


def _layer_kind_refusal(batch: Any, layer: Any) -> str | None:
    """What of the step or the layer itself the kernel does not take (its device and shapes aside)."""
    a, m = layer.self_attn, layer.mlp
    if batch.is_prefill:
        return "a prefill or serving step (decode rows only)"
    if not all(hasattr(a, n) for n in ("qkv_proj", "q_norm", "k_norm")) or not hasattr(m, "gate_up_proj"):
        return "not a dense Qwen3 layer (its attention's q/k norms and a gated MLP)"
    projections = (a.qkv_proj, a.o_proj, m.gate_up_proj, m.down_proj)
    if any(p.quantized for p in projections):
        return "a quantized projection"
    if a.qkv_proj.bias is not None or a.o_proj.bias is not None:
        return "a projection bias"
    if any(getattr(p, "all_reduce", None) is not None for p in (a.o_proj, m.down_proj)):
        return "tensor parallel (its all-reduces)"
    return None


def _persistent_shape(rows: int, first: bool, layer: Any) -> LayerShape:
    a, m = layer.self_attn, layer.mlp
    hidden, inter = layer.input_layernorm.weight.shape[0], m.gate_up_proj.weight.shape[0] // 2
    return persistent.decode_shape(
        rows, hidden, a.num_heads, a.num_kv_heads, a.head_dim, inter, first, a.sliding_window
    )


def _supports_persistent(x: torch.Tensor, residual: torch.Tensor | None, cos_sin: Any, batch: Any, layer: Any) -> bool:
    return persistent_refusal(x, residual, cos_sin, batch, layer) is None


def persistent_weights(layer: Any) -> dict[str, torch.Tensor]:
    """A dense Qwen3 layer's weights by the persistent kernel's names (`persistent.WEIGHTS`): views, no copies."""
    a, m = layer.self_attn, layer.mlp
    return dict(
        ln1=layer.input_layernorm.weight, ln2=layer.post_attention_layernorm.weight, wq=a.q_proj.weight,
        wk=a.k_proj.weight, wv=a.v_proj.weight, wo=a.o_proj.weight, wg=m.gate_proj.weight, wu=m.up_proj.weight,
        wd=m.down_proj.weight, q_norm=a.q_norm.weight, k_norm=a.k_norm.weight,
    )  # fmt: skip


def _layer_persistent(
    flags: FlagSnapshot, x: torch.Tensor, residual: torch.Tensor | None, cos_sin: Any, batch: Any, layer: Any
) -> Normed:
    a = layer.self_attn
    k_cache, v_cache = batch.kv_caches[a.layer_idx]
    weights = persistent_weights(layer)
    cos, sin = cos_sin
    capacity = batch.block_tables.shape[1] * k_cache.shape[1]  # not the lengths: no host read, graph-replayable
    t = persistent.tensors(
        x, residual, weights, (k_cache, v_cache), batch.slot_mapping, (cos.contiguous(), sin.contiguous()),
        batch.block_tables, batch.context_lens, a.num_heads, capacity,
    )  # fmt: skip
    persistent.launch(_persistent_shape(x.shape[0], residual is None, layer), t, layer.input_layernorm.eps, a.scaling)
    return t.mlp, t.res2


def raise_persistent_faults() -> None:
    """Raise with the faults the persistent arm's launches recorded since the last call (a broken wait or a bad
    token: their outputs are wrong). Reads nothing when the arm never ran; the runner calls it once a decode step's
    tokens are on the host."""
    found = persistent.faults()
    if found:
        raise RuntimeError("; ".join(found))


decode_layer_op = Op(
    decode_layer,
    check_x,
    [
        _arm(
            "persistent",
            gated_by("VT_PERSISTENT_LAYER"),
            _supports_persistent,
            "a plain decode step of a dense bf16/fp16 Qwen3 layer on one GPU (persistent_refusal)",
            _layer_persistent,
        ),
        _arm("chain", gated_by(), supports_any, "any layer", _layer_chain),
    ],
)


# --- decode_model: a decode step's embedding, layers and final norm ---------------------------------------------
def decode_model(
    input_ids: torch.Tensor,  # [tokens]
    positions: torch.Tensor,  # [tokens]
    batch: Any,  # the step's ForwardBatch (its kv_caches written in place)
    model: Any,  # the Qwen3Model: `chain` is its embedding, layers and final norm in turn
) -> torch.Tensor:  # [tokens, hidden]: the final norm's output
    """The model's embedding, its layers and its final norm in turn (`model.chain`), every kernel off."""
    return model.chain(input_ids, positions, _with_flags(batch, _UNFUSED))


def check_ids(input_ids: torch.Tensor, *_: Any) -> None:
    check_tensor(input_ids, "input_ids")


def _model_chain(flags: FlagSnapshot, input_ids: torch.Tensor, positions: torch.Tensor, batch: Any, model: Any) -> Any:
    return model.chain(input_ids, positions, _with_flags(batch, flags))


def persistent_step_refusal(input_ids: torch.Tensor, positions: torch.Tensor, batch: Any, model: Any) -> str | None:
    """Why the persistent step cannot run this call (None: it can): every layer as `persistent_refusal` says, at
    most `persistent.MAX_LAYERS` of them, and the whole vocabulary on this rank."""
    layers, embed = list(model.layers), model.embed_tokens
    if not layers or len(layers) > persistent.MAX_LAYERS:
        return f"{len(layers)} layers (1 to {persistent.MAX_LAYERS} a launch)"
    if embed.comm is not None:
        return "tensor parallel (a vocabulary-parallel embedding)"
    if len({layer.self_attn.sliding_window for layer in layers}) > 1:
        return "layers with different sliding windows (one window a launch)"
    for i, layer in enumerate(layers):
        why = _layer_kind_refusal(batch, layer)
        if why is not None:
            return f"layer {i}: {why}"
    # the layers' shapes are layer 0's (the step's table repeats one layer's)
    return _refusal(batch, layers[0], embed.weight, input_ids.shape[0], True)


def _supports_step(input_ids: torch.Tensor, positions: torch.Tensor, batch: Any, model: Any) -> bool:
    return persistent_step_refusal(input_ids, positions, batch, model) is None


def _model_persistent(
    flags: FlagSnapshot, input_ids: torch.Tensor, positions: torch.Tensor, batch: Any, model: Any
) -> torch.Tensor:
    cfg, embed = model.config, model.embed_tokens.weight
    rows, hidden = input_ids.shape[0], embed.shape[1]
    cos, sin = rope_cos_sin(positions, cfg.head_dim, cfg.rope_theta, embed.dtype)
    capacity = batch.block_tables.shape[1] * batch.kv_caches[0][0].shape[1]
    # one scores scratch for every layer (persistent.SHARED): layer l+1's score tasks wait, through its norm on
    # layer l's down tiles, for layer l's softmax tasks, the scratch's readers (lab/persistent/check.py proves it)
    scores = torch.empty(rows * model.layers[0].self_attn.num_heads, capacity, dtype=torch.float32, device=embed.device)
    x = torch.empty(rows, hidden, dtype=embed.dtype, device=embed.device)  # the EMBED tasks' rows
    layers = persistent.step_tensors(
        x, [persistent_weights(layer) for layer in model.layers], list(batch.kv_caches[: len(model.layers)]),
        batch.slot_mapping, (cos.contiguous(), sin.contiguous()), batch.block_tables, batch.context_lens,
        model.layers[0].self_attn.num_heads, capacity, scores=scores,
    )  # fmt: skip
    final = torch.empty(rows, hidden, dtype=embed.dtype, device=embed.device)
    ends = persistent.ModelTensors(input_ids, embed, model.norm.weight, None, final, None)
    first = model.layers[0]
    shape = _persistent_shape(rows, True, first)
    persistent.launch_model(shape, embed.shape[0], layers, ends, model.norm.eps, first.self_attn.scaling)
    return final


decode_model_op = Op(
    decode_model,
    check_ids,
    [
        _arm(
            "persistent_step",
            gated_by("VT_PERSISTENT_STEP"),
            _supports_step,
            "a plain decode step of a dense bf16/fp16 Qwen3 model on one GPU (persistent_step_refusal)",
            _model_persistent,
        ),
        _arm("chain", gated_by(), supports_any, "any model", _model_chain),
    ],
)
