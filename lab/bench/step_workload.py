"""The whole decode step as a benchmark workload, so `bench ab` can A/B a flag that acts across the model.

A Qwen3-0.6B-shaped model with random weights (fewer layers with `layers=`), `batch` sequences
prefilled to `ctx` tokens, then one greedy decode step from device inputs (`Runner.sample_step`, the
engine's one decode program, capturable). Bytes that must move: every weight once (a tied head read as the head) and the K/V of
every cached token once.

    python -m lab bench ab --flag VT_MERGED_PROJ --workload decode-step [--shape ctx=1024,layers=28]
    python -m lab bench bandwidth --workload decode-step    # the defaults against the step's arms off

`decode-step-awq`, `decode-step-gptq` and `decode-step-nvfp4` run the same step on the model with every
decoder projection quantized (lab/data/make_tiny_quant.py, group 128): the A/B of VT_DEQUANT_GEMV.

    VT_DEQUANT_KERNEL=1 python -m lab bench ab --flag VT_DEQUANT_GEMV --workload decode-step-awq
    python -m lab bench ab --flag VT_DEQUANT_KERNEL --workload decode-step-awq --shape batch=32   # M = 32

`decode-step-qwen3next` runs it on a Qwen3-Next with Qwen3-Next-80B's layer shapes (gated delta net heads,
attention, MoE of 32 of its 512 experts with the shared expert; `layers` of them, every fourth full attention,
default 4 at batch 32): the A/B of VT_GDN_KERNEL on the captured step (the MoE step captures with VT_MOE_KERNELS).
Each call advances the recurrent state; the A/B's equality check restores it first (`reset`).

    VT_MOE_KERNELS=1 python -m lab bench ab --flag VT_GDN_KERNEL --workload decode-step-qwen3next
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from engine.flags import FlagSnapshot
from engine.runner import Runner
from engine.sampler import Mode
from lab.data.make_tiny_quant import write_pair
from lab.drive import Session

QWEN3_0_6B = dict(
    hidden_size=1024,
    intermediate_size=3072,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=151936,
    tie_word_embeddings=True,
    max_position_embeddings=40960,
    rms_norm_eps=1e-6,
    rope_theta=1000000.0,
)
TINY = dict(
    QWEN3_0_6B,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    vocab_size=512,
)
STEP_DEFAULTS = {"ctx": 1024, "batch": 1, "layers": 28}
STEP_ARMS = ("VT_GEMV", "VT_MERGED_PROJ", "VT_QK_NORM_ROPE_FUSED")  # ON after winning their A/B on this step
FUSED_ARMS = ("VT_QKV_ROPE_STORE", "VT_NORM_GEMV", "VT_GEMV_PDL")
_SEQ_SETS = 2  # input sets rotate over this many groups of sequences (the weights dwarf the L2 anyway)
_RUNNERS: dict[tuple, Runner] = {}  # one model per shape: the input sets share it
QUANT_METHODS = ("awq", "gptq", "nvfp4")  # the quantized step workloads
QUANT_GROUP = 128  # AWQ/GPTQ rows per scale, as the common checkpoints have
# Qwen3NextConfig keyword arguments over transformers' defaults (Qwen3-Next-80B-A3B's shapes): 32 of the 512 experts
# (at batch 32 the top-10 routing reads nearly all of them), so the model builds and loads in seconds
QWEN3_NEXT: dict = dict(num_experts=32)
NEXT_DEFAULTS = {"ctx": 512, "batch": 32, "layers": 4}
_SNAPSHOTS: dict[int, object] = {}  # id(runner) -> its recurrent state after the last prefill (reset)


def save_random_model(tmp: Path, shape: dict) -> Path:
    """A Qwen3 of this shape with seeded random weights, saved by transformers (the oracle's own layout)."""
    from transformers import (  # why: transformers takes seconds to import
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(**shape))
    model = model.to(torch.bfloat16)  # type: ignore[arg-type]  # transformers mistypes .to (self unbound)
    model.save_pretrained(tmp)
    return tmp


def _model_shape(s: dict[str, int]) -> dict:
    if s["layers"] < 1 or s["ctx"] < 1 or s["batch"] < 1:
        raise ValueError(f"decode-step shape {s}: ctx, batch and layers must be at least 1")
    return dict(QWEN3_0_6B, num_hidden_layers=s["layers"])


def _next_shape(s: dict[str, int]) -> dict:
    if s["layers"] < 1 or s["ctx"] < 1 or s["batch"] < 1:
        raise ValueError(f"decode-step-qwen3next shape {s}: ctx, batch and layers must be at least 1")
    return dict(QWEN3_NEXT, num_hidden_layers=s["layers"])


def save_random_next(tmp: Path, shape: dict, device: torch.device) -> Path:
    """A Qwen3-Next of this shape with seeded random weights (initialised on `device`: seconds on a GPU), saved by
    transformers in bf16."""
    from transformers import (  # why: transformers takes seconds to import
        Qwen3NextConfig,
        Qwen3NextForCausalLM,
    )

    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3NextForCausalLM(Qwen3NextConfig(**shape))
    model = model.to(torch.bfloat16)  # type: ignore[arg-type]  # transformers mistypes .to (self unbound)
    model.save_pretrained(tmp)
    return tmp


def _runner(s: dict[str, int], device: torch.device, dtype: torch.dtype, method: str | None = None) -> Runner:
    key = (s["ctx"], s["batch"], s["layers"], str(device), dtype, method)
    if key not in _RUNNERS:
        with tempfile.TemporaryDirectory(prefix="vt-step-") as tmp:  # loaded into memory, then removed
            model_dir = Path(tmp)
            if method is None:
                save_random_model(model_dir, _model_shape(s))
            elif method == "qwen3next":
                save_random_next(model_dir, _next_shape(s), device)
            else:
                model_dir = _save_quantized(model_dir, _model_shape(s), method)
            _RUNNERS[key] = Runner(
                model_dir,
                dtype,
                str(device),
                max_batch=_SEQ_SETS * s["batch"],
                max_model_len=s["ctx"] + 8,
                block_size=32,
            )
    return _RUNNERS[key]


def _save_quantized(tmp: Path, shape: dict, method: str) -> Path:
    """The random model with its decoder projections quantized by `method`; returns the checkpoint's directory."""
    from transformers import (  # why: transformers takes seconds to import
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(**shape))
    model = model.to(torch.bfloat16)  # type: ignore[arg-type]  # transformers mistypes .to (self unbound)
    return write_pair(model, method, tmp, group=QUANT_GROUP, dense=False)[0]


def quant_make(method: str) -> Callable[[dict[str, int], torch.device, torch.dtype, int], tuple]:
    """`make` of the step on the `method`-quantized model."""

    def make_quant(s: dict[str, int], device: torch.device, dtype: torch.dtype, seed: int) -> tuple:
        return make(s, device, dtype, seed, method)

    return make_quant


@torch.inference_mode()
def make(s: dict[str, int], device: torch.device, dtype: torch.dtype, seed: int, method: str | None = None) -> tuple:
    """(runner, inputs): `batch` sequences of this set prefilled to ctx tokens, and their next step's inputs."""
    runner = _runner(s, device, dtype, method)
    first = (seed % _SEQ_SETS) * s["batch"]
    seq_ids = list(range(first, first + s["batch"]))
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, runner.config.vocab_size, (s["ctx"],), generator=g).tolist() for _ in seq_ids]
    session = Session(runner, seq_ids, prompts)
    session.prefill()
    # the staging is the runner's, one per padded size: this set keeps a copy of its inputs
    inputs = {k: v.clone() for k, v in session.prepare().device_inputs().items()}
    if runner.recurrent is not None:  # Qwen3-Next: the sets use disjoint slots, so the last copy has them all
        _SNAPSHOTS[id(runner)] = runner.recurrent.copy()
    return runner, inputs


@torch.inference_mode()  # the state is an inference tensor
def reset(runner: Runner, inputs: dict[str, torch.Tensor]) -> None:
    """Put the recurrent state back as the prefills left it (a no-op for a model without one): two arms' outputs
    compared after a reset start from the same state."""
    saved = _SNAPSHOTS.get(id(runner))
    if runner.recurrent is not None and saved is not None:
        runner.recurrent.load(saved)  # type: ignore[arg-type]  # a RecurrentState, stored by make


@torch.inference_mode()
def run(snapshot: FlagSnapshot, runner: Runner, inputs: dict[str, torch.Tensor]) -> torch.Tensor:  # -> [batch] int64
    """One greedy decode step of the shared runner under this arm's flags (the next tokens): the engine's decode
    program, Runner.sample_step, at temperature 0."""
    return runner.sample_step(Mode.GREEDY, extras=None, flags=snapshot, **inputs)


def bytes_moved(s: dict[str, int], dtype: torch.dtype, method: str | None = None) -> int:
    c = _model_shape(s)
    h, d, inter = c["hidden_size"], c["head_dim"], c["intermediate_size"]
    hq, hkv = c["num_attention_heads"], c["num_key_value_heads"]
    elt = torch.empty((), dtype=dtype).element_size()
    # (in, out) of each decoder projection: q, k, v, o, gate, up, down
    projections = [(h, hq * d), (h, hkv * d), (h, hkv * d), (hq * d, h), (h, inter), (h, inter), (inter, h)]
    packed = sum(_weight_bytes(k, n, elt, method) for k, n in projections)
    per_layer = packed + (2 * h + 2 * d) * elt  # projections, norms
    # the head is read whole; the embedding only one row per token (tied or not)
    weights = c["num_hidden_layers"] * per_layer + (c["vocab_size"] * h + h) * elt
    kv = 2 * c["num_hidden_layers"] * s["batch"] * (s["ctx"] + 1) * hkv * d * elt
    return weights + kv


def next_bytes(s: dict[str, int], dtype: torch.dtype) -> int:
    """The Qwen3-Next step: every weight once (the embedding one row per token), each delta net layer's fp32 state
    and conv inputs read and written, each attention layer's cached K/V read."""
    from transformers import (  # why: transformers takes seconds to import
        Qwen3NextConfig,
        Qwen3NextForCausalLM,
    )

    config = Qwen3NextConfig(**_next_shape(s))
    with torch.device("meta"):
        model = Qwen3NextForCausalLM(config)
    elt = torch.empty((), dtype=dtype).element_size()
    weights = sum(p.numel() for n, p in model.named_parameters() if not n.endswith("embed_tokens.weight"))
    b, h = s["batch"], config.hidden_size
    linear = sum(t == "linear_attention" for t in config.layer_types or ())
    heads, dk, dv = config.linear_num_value_heads, config.linear_key_head_dim, config.linear_value_head_dim
    conv_dim = 2 * config.linear_num_key_heads * dk + heads * dv
    state = linear * 2 * b * (heads * dk * dv * 4 + conv_dim * config.linear_conv_kernel_dim * elt)
    kv = 2 * (config.num_hidden_layers - linear) * b * (s["ctx"] + 1) * config.num_key_value_heads * config.head_dim
    return (weights + b * h + kv) * elt + state


def quant_bytes(method: str) -> Callable[[dict[str, int], torch.dtype], int]:
    return lambda s, dtype: bytes_moved(s, dtype, method)


def _weight_bytes(k: int, n: int, elt: int, method: str | None) -> int:
    """Bytes of one [k in, n out] projection's weight as stored: dense, or packed with its scales."""
    if method is None:
        return k * n * elt
    if method == "nvfp4":  # e2m1 pairs, an e4m3 scale per 16, the fp32 global scale
        return k * n // 2 + k * n // 16 + 4
    groups = -(-k // QUANT_GROUP)  # int4 values, int4 zeros and fp16 scales per group (GPTQ: int32 g_idx)
    return k * n // 2 + groups * n // 2 + groups * n * 2 + (4 * k if method == "gptq" else 0)
