"""With the split-KV arm named (`splitkv_swap`, by name only: outside the default order) the decode step is
captured as a CUDA graph (no fallback) and replays the same tokens as the eager step (GPU)."""

from __future__ import annotations

import pytest
import torch

from engine import kernels
from engine.flags import FlagSnapshot
from engine.llm import LLM
from engine.sampler import Mode
from lab.drive import greedy
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
    calls: list[tuple[int, int]] = []  # (max_context, split count) per split-KV call
    heuristic = splitkv.num_splits

    def spy(rows: int, max_context: int, sms: int) -> int:
        calls.append((max_context, heuristic(rows, max_context, sms)))
        return calls[-1][1]

    monkeypatch.setattr(splitkv, "num_splits", spy)
    # named: tried before the tiled arm, whatever the flags
    split = kernels.naming(FlagSnapshot.from_env(), "paged_decode_attention", "splitkv_swap")
    eager, graph = (
        LLM(model, "bfloat16", "cuda", max_num_seqs=4, max_model_len=MAX_MODEL_LEN, flags=split.with_(VT_EAGER=e))
        for e in (True, False)
    )
    prompts = default_prompts(211, 17, LENS)
    got = greedy(graph, prompts, 10)
    # fails while split-KV reads context_lens on the host: the capture breaks and the runner goes eager
    assert graph.runner.use_graph and graph.runner.captured == [(4, Mode.GREEDY)], "split-KV step not captured"
    assert got == greedy(eager, prompts, 10)
    # a decode step (eager or replayed) stages the full capacity, 69 blocks, and its split count follows it; the
    # 1-token prompt rides the mixed step beside the 300-token prefill as a decode row whose table is that step's
    # longest (19 blocks): an eager step in both LLMs, so it cannot part eager and graphed tokens
    capacity = -(-MAX_MODEL_LEN // 16) * 16
    decode_counts = {count for longest, count in calls if longest == capacity}
    assert len(decode_counts) == 1 and decode_counts.pop() > 1, calls
    assert {longest for longest, _ in calls} == {capacity, 19 * 16}, calls
    assert kernels.counts().ran[("paged_decode_attention", "splitkv_swap")] > 0
