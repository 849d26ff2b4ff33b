"""A decode step of one Qwen3 layer with seeded random weights, inputs and paged cache, and the engine's own layer
(`engine.model.qwen3.Qwen3DecoderLayer` through the kernel table) run on it: the chain the persistent schedule must
reproduce bitwise. `make_model` / `reference_model`: the same for a whole decode step of the engine's
`Qwen3ForCausalLM` (token ids to logits)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import cast

import torch

from engine.cuda import persistent
from engine.cuda.persistent_schedule import LayerShape
from engine.kernels.layer import persistent_weights
from engine.model.config import ModelConfig, parse_config
from engine.model.qwen3 import Qwen3DecoderLayer, Qwen3ForCausalLM
from engine.ops.rope import rope_cos_sin
from lab.persistent.sim import Head, Step, Weights

# Qwen3-0.6B's layer, and a small one of the same form for quick CPU runs
QWEN3_0_6B = dict(hidden_size=1024, intermediate_size=3072, num_attention_heads=16, num_key_value_heads=8, head_dim=128)
SMALL = dict(hidden_size=256, intermediate_size=640, num_attention_heads=8, num_key_value_heads=2, head_dim=128)


def config(
    sizes: dict[str, int], window: int | None = None, layers: int = 1, vocab: int = 64, tied: bool = True
) -> ModelConfig:
    raw = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "num_hidden_layers": layers,
        "vocab_size": vocab,
        "tie_word_embeddings": tied,
        "max_position_embeddings": 1 << 16,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1e6,
        **sizes,
    }
    if window is not None:
        raw.update(use_sliding_window=True, sliding_window=window, max_window_layers=0)
    return parse_config(raw)


@dataclass
class Case:
    layers: list[Qwen3DecoderLayer]
    weights: list[Weights]  # one per layer
    step: Step  # the caches as they are before the step; simulate and reference each take a copy

    @property
    def layer(self) -> Qwen3DecoderLayer:
        return self.layers[0]

    def shape(self, first: bool, **tiles: int) -> LayerShape:
        c = self.layer.self_attn
        return LayerShape(
            hidden=self.weights[0].wq.shape[1],
            heads=c.num_heads,
            kv_heads=c.num_kv_heads,
            head_dim=c.head_dim,
            intermediate=self.weights[0].wd.shape[1],
            context_lens=tuple(int(n) for n in self.step.context_lens),
            first=first,
            window=self.weights[0].window,
            **tiles,
        )

    def fresh_step(self, first: bool = False) -> Step:
        """The step with its own copy of the caches (and no residual for layer 0)."""
        s = self.step
        more = [(k.clone(), v.clone()) for k, v in s.more_caches]
        return replace(
            s,
            k_cache=s.k_cache.clone(),
            v_cache=s.v_cache.clone(),
            more_caches=more,
            residual=None if first else s.residual,
        )


def make(
    sizes: dict[str, int],
    context_lens: list[int],
    seed: int,
    block_size: int = 16,
    window: int | None = None,
    layers: int = 1,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> Case:
    """Random weights (scaled so activations stay O(1)), inputs and caches holding each sequence's earlier keys.
    The layers are built on `device` in `dtype` (the engine's modules are built where they run: a merged weight and
    its parts' views do not survive `.to()`); the weights are drawn on the CPU in fp32 either way, so a device
    case's are the CPU case's rounded to `dtype`. The step's tensors stay on the CPU in fp32."""
    cfg = config(sizes, window, layers)
    g = torch.Generator().manual_seed(seed)
    with torch.device(device):
        stack = [Qwen3DecoderLayer(cfg, i, dtype) for i in range(layers)]
    _randomise((p for layer in stack for p in layer.parameters()), g)
    step = _step(cfg, context_lens, g, block_size, layers)
    return Case(stack, [Weights.of(layer) for layer in stack], step)


def _randomise(params, g: torch.Generator) -> None:
    """Matrices: unit-variance outputs; norms: ~1."""
    with torch.no_grad():
        for p in params:
            noise = torch.randn(p.shape, generator=g)  # on the CPU in fp32, whatever the parameter's device and dtype
            p.copy_(noise / p.shape[-1] ** 0.5 if p.dim() == 2 else 1 + 0.1 * noise)


def _step(cfg: ModelConfig, context_lens: list[int], g: torch.Generator, block_size: int, layers: int) -> Step:
    b, kv, d = len(context_lens), cfg.num_key_value_heads, cfg.head_dim
    per_seq = [(n + block_size - 1) // block_size for n in context_lens]
    blocks = sum(per_seq) + 1
    order = torch.randperm(blocks, generator=g).tolist()  # sequences' blocks scattered through the cache
    tables = torch.full((b, max(per_seq)), -1, dtype=torch.int32)
    for i, m in enumerate(per_seq):
        tables[i, :m] = torch.tensor([order.pop() for _ in range(m)], dtype=torch.int32)
    lens = torch.tensor(context_lens, dtype=torch.int32)
    pos = (lens - 1).long()
    slots = tables.long()[torch.arange(b), pos // block_size] * block_size + pos % block_size
    cos, sin = rope_cos_sin(pos, d, cfg.rope_theta, torch.float32)
    return Step(
        x=torch.randn(b, cfg.hidden_size, generator=g),
        residual=torch.randn(b, cfg.hidden_size, generator=g),
        k_cache=torch.randn(blocks, block_size, kv, d, generator=g),
        v_cache=torch.randn(blocks, block_size, kv, d, generator=g),
        block_tables=tables,
        context_lens=lens,
        slot_mapping=slots,
        cos=cos,
        sin=sin,
        more_caches=[
            (torch.randn(blocks, block_size, kv, d, generator=g), torch.randn(blocks, block_size, kv, d, generator=g))
            for _ in range(layers - 1)
        ],
    )


@dataclass
class ModelCase(Case):
    """A whole decode step: the engine's causal LM, its layers' weights and its own (`head`), the step's ids."""

    lm: Qwen3ForCausalLM | None = None
    head: Head | None = None


def make_model(
    sizes: dict[str, int],
    context_lens: list[int],
    seed: int,
    layers: int,
    vocab: int,
    tied: bool = True,
    block_size: int = 16,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> ModelCase:
    """The engine's `Qwen3ForCausalLM` with random weights (as `make`'s; the head the embedding's own tensor when
    `tied`), a token id per sequence and the caches; the step's `x` is None (its EMBED tasks write it)."""
    cfg = config(sizes, None, layers, vocab, tied)
    g = torch.Generator().manual_seed(seed)
    with torch.device(device):  # built where it runs, as `make`'s layers
        lm = Qwen3ForCausalLM(cfg, dtype)
    _randomise(lm.parameters(), g)  # a tied head is one parameter: drawn once
    step = replace(_step(cfg, context_lens, g, block_size, layers), x=None, residual=None)
    step.ids = torch.randint(0, vocab, (len(context_lens),), generator=g)
    stack = [cast(Qwen3DecoderLayer, layer) for layer in lm.model.layers]
    return ModelCase(stack, [Weights.of(layer) for layer in stack], step, lm, Head.of(lm))


def reference(case: Case, step: Step) -> dict[str, torch.Tensor]:
    """The engine's layers on `step`, one after the other (caches written in place): the last layer's `mlp` (its
    output delta), `res2` (the residual it returns) and `out` (their sum, which a next layer's norm forms first).
    Keys are the schedule's buffer names (`L<i>.` before them for a step of several layers)."""
    batch = step.batch()
    assert step.x is not None  # a layer case's step carries its input rows (a model step's EMBED tasks write them)
    hidden, residual = step.x, step.residual
    with torch.no_grad():
        for layer in case.layers:
            hidden, residual = layer(hidden, residual, (step.cos, step.sin), batch)
    assert residual is not None  # every layer returns the residual it formed
    prefix = "" if len(case.layers) == 1 else f"L{len(case.layers) - 1}."
    return {prefix + "mlp": hidden, prefix + "res2": residual, prefix + "out": hidden + residual}


def reference_model(case: ModelCase, step: Step) -> dict[str, torch.Tensor]:
    """The engine's model on `step` (caches written in place): its final hidden state (`final`, after the model's
    norm) and `logits` (`compute_logits`), keyed by the schedule's buffer names."""
    assert case.lm is not None and step.ids is not None
    batch = step.batch()
    positions = (step.context_lens - 1).long()  # the RoPE `_step` gave the layers: this token's position
    with torch.no_grad():
        final = case.lm(step.ids, positions, batch)
        return {"final": final, "logits": case.lm.compute_logits(final, batch.flags)}


def model_tensors(
    case: ModelCase, step: Step, head: bool, fill: float | None = float("nan"), shared_scores: bool = False
) -> tuple[list[persistent.LayerTensors], persistent.ModelTensors]:
    """A model case's tensors for one persistent launch of its whole step, on the step's device: every layer's
    (layer i's input and residual are layer i-1's mlp and res2; layer 0's input the EMBED tasks' rows), and the
    model's ends (with the LM head when `head`, else the step ends at the final norm, as the decode step's arm).
    Outputs and scratch are filled with `fill` (NaN: a cell the kernel fails to write shows); `shared_scores`: every
    layer uses one scores scratch, as the arm's table (`persistent.SHARED`) allows."""
    assert case.lm is not None and step.ids is not None
    m = case.lm.model
    b, (vocab, h) = len(step.context_lens), m.embed_tokens.weight.shape
    dtype, device = m.embed_tokens.weight.dtype, step.cos.device

    def new(rows: int, width: int, dt: torch.dtype = dtype) -> torch.Tensor:
        t = torch.empty(rows, width, dtype=dt, device=device)
        return t if fill is None else t.fill_(fill)

    width = int(step.context_lens.max())
    scores = new(b * case.layers[0].self_attn.num_heads, width, torch.float32) if shared_scores else None
    layers = persistent.step_tensors(  # layer 0's input: the EMBED tasks' rows
        new(b, h), [persistent_weights(layer) for layer in case.layers], step.caches(), step.slot_mapping,
        (step.cos.contiguous(), step.sin.contiguous()), step.block_tables, step.context_lens,
        case.layers[0].self_attn.num_heads, width, fill, scores,
    )  # fmt: skip
    model = persistent.ModelTensors(
        ids=step.ids, embed=m.embed_tokens.weight, final_norm=m.norm.weight,
        head=case.lm.lm_head.weight if head else None, final=new(b, h), logits=new(b, vocab) if head else None,
    )  # fmt: skip
    return layers, model


def on(step: Step, device: torch.device | str, dtype: torch.dtype) -> Step:
    """`step`'s tensors on `device` (floats in `dtype`), its caches copied."""

    def move(v: torch.Tensor) -> torch.Tensor:
        return v.to(device, dtype) if v.is_floating_point() else v.to(device)

    moved = {f.name: getattr(step, f.name) for f in fields(step)}
    moved = {k: move(v) if isinstance(v, torch.Tensor) else v for k, v in moved.items()}
    moved["more_caches"] = [(move(k), move(v)) for k, v in step.more_caches]
    return replace(step, **moved)
