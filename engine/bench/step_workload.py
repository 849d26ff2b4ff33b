"""The whole decode step as a benchmark workload, so `bench ab` can A/B a flag that acts across the model.

A Qwen3-0.6B-shaped model with random weights (fewer layers with `layers=`), `batch` sequences
prefilled to `ctx` tokens, then one greedy decode step from device inputs (`Runner.decode_step`,
capturable). Bytes that must move: every weight once (a tied head read as the head) and the K/V of
every cached token once.

    python -m engine bench ab --flag VT_MERGED_PROJ --workload decode-step [--shape ctx=1024,layers=28]
    python -m engine bench bandwidth --workload decode-step    # the defaults against the step's arms off
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import torch

STEP_DEFAULTS = {"ctx": 1024, "batch": 1, "layers": 28}
STEP_ARMS = ("VT_GEMV", "VT_MERGED_PROJ", "VT_QK_NORM_ROPE_FUSED")  # ON after winning their A/B on this step
_SEQ_SETS = 2  # input sets rotate over this many groups of sequences (the weights dwarf the L2 anyway)
_RUNNERS: dict[tuple, object] = {}  # one model per shape: the input sets share it


def _model_shape(s: dict[str, int]) -> dict:
    from engine.bench.decode import QWEN3_0_6B

    if s["layers"] < 1 or s["ctx"] < 1 or s["batch"] < 1:
        raise ValueError(f"decode-step shape {s}: ctx, batch and layers must be at least 1")
    return dict(QWEN3_0_6B, num_hidden_layers=s["layers"])


def _runner(s: dict[str, int], device: torch.device, dtype: torch.dtype):
    from engine.bench.decode import save_random_model
    from engine.runner import Runner

    key = (s["ctx"], s["batch"], s["layers"], str(device), dtype)
    if key not in _RUNNERS:
        with tempfile.TemporaryDirectory(prefix="vt-step-") as tmp:  # loaded into memory, then removed
            save_random_model(Path(tmp), _model_shape(s))
            _RUNNERS[key] = Runner(tmp, dtype, str(device), max_batch=_SEQ_SETS * s["batch"],
                                   max_model_len=s["ctx"] + 8, block_size=32)
    return _RUNNERS[key]


@torch.inference_mode()
def make(s: dict[str, int], device: torch.device, dtype: torch.dtype, seed: int) -> tuple:
    """(runner, inputs): `batch` sequences of this set prefilled to ctx tokens, and their next step's inputs."""
    runner = _runner(s, device, dtype)
    first = (seed % _SEQ_SETS) * s["batch"]
    seq_ids = list(range(first, first + s["batch"]))
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, runner.config.vocab_size, (s["ctx"],), generator=g).tolist() for _ in seq_ids]
    for sid in seq_ids:
        if sid in runner.blocks.tables:  # a later set on the same sequences starts them afresh
            runner.blocks.free(sid)
        runner.blocks.allocate(sid, s["ctx"])
    last = runner.prefill(seq_ids, prompts).tolist()
    inputs = runner.decode_inputs(seq_ids, last, s["batch"])
    return runner, {k: v.to(device) for k, v in inputs.items()}


@torch.inference_mode()
def run(runner, inputs: dict[str, torch.Tensor]) -> torch.Tensor:  # -> [batch] int64 next tokens
    return runner.decode_step(**inputs)


def bytes_moved(s: dict[str, int], dtype: torch.dtype) -> int:
    c = _model_shape(s)
    h, d, inter = c["hidden_size"], c["head_dim"], c["intermediate_size"]
    hq, hkv = c["num_attention_heads"], c["num_key_value_heads"]
    per_layer = h * (hq + 2 * hkv) * d + hq * d * h + 3 * h * inter + 2 * h + 2 * d  # projections, MLP, norms
    # the head is read whole; the embedding only one row per token (tied or not)
    weights = c["num_hidden_layers"] * per_layer + c["vocab_size"] * h + h
    kv = 2 * c["num_hidden_layers"] * s["batch"] * (s["ctx"] + 1) * hkv * d
    return (weights + kv) * torch.empty((), dtype=dtype).element_size()
