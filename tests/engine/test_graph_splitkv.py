"""With VT_ATTN_SPLITKV=1 the decode step is captured as a CUDA graph (no fallback) and replays the same
tokens as the eager step (GPU)."""

from __future__ import annotations

import pytest
import torch

from engine.flags import FlagSnapshot
from engine.runner import Runner
from lab.gates.tokens import default_prompts

# head_dim 64: a shape split-KV is compiled for (the embedded tiny model's 32 falls back to the generic arm)
SHAPE = dict(head_dim=64, max_position_embeddings=2048)
MAX_MODEL_LEN = 1100  # 69 blocks of 16: a capacity of 1104 positions, several splits
LENS = (1, 13, 300)


@pytest.mark.gpu
def test_split_kv_decode_step_is_captured_and_equals_eager(tiny_checkpoint, monkeypatch) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the decode-step graph needs one")
    from engine.cuda import splitkv

    model = tiny_checkpoint("dense", seed=3, **SHAPE)
    counts: list[int] = []
    heuristic = splitkv.num_splits
    monkeypatch.setattr(splitkv, "num_splits", lambda *a: counts.append(heuristic(*a)) or counts[-1])
    # the tiled arm takes precedence where it is compiled
    split = FlagSnapshot.from_env().with_(VT_ATTN_TILED=False, VT_ATTN_SPLITKV=True)
    eager = Runner(
        model,
        dtype=torch.bfloat16,
        device="cuda",
        max_batch=4,
        max_model_len=MAX_MODEL_LEN,
        flags=split.with_(VT_EAGER=True),
    )
    graph = Runner(
        model,
        dtype=torch.bfloat16,
        device="cuda",
        max_batch=4,
        max_model_len=MAX_MODEL_LEN,
        flags=split.with_(VT_EAGER=False),
    )
    prompts = default_prompts(211, 17, LENS)
    got = graph.generate(prompts, 10).tokens
    # fails while split-KV reads context_lens on the host: the capture breaks and the runner goes eager
    assert graph.use_graph and set(graph._graphs) == {4}, "the split-KV decode step was not captured"
    assert got == eager.generate(prompts, 10).tokens
    assert counts and min(counts) == max(counts) > 1  # the capacity, not the context, sized every call
