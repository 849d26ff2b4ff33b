"""engine.LLM on Qwen3-Next (gated delta net layers with a recurrent state per sequence): greedy tokens equal to
transformers' own generate through continuous batching, chunked prefill and preemption; no state slot leaks."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
import torch

from engine import LLM, SamplingParams, kernels
from lab.gates.oracle import Oracle
from tests.engine.model.qwen3_next_tiny import next_checkpoint

__all__ = ["next_checkpoint"]  # the fixture, imported

GREEDY = {"temperature": 0.0, "ignore_eos": True}
# prompts of 1..70 tokens (70 crosses the 64-token chunk of the delta net's chunked prefill), new tokens 1..14
LENS = (1, 5, 23, 58, 70, 9, 33, 2, 14)
LIMITS = (14, 3, 9, 12, 6, 1, 11, 13, 8)


def prompts_of(lens: tuple[int, ...], seed: int, vocab: int = 211) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(n)] for n in lens]


@pytest.fixture(scope="module")
def case(next_checkpoint) -> tuple[Path, list[list[int]], list[list[int]]]:
    """The MoE + shared-expert checkpoint, the prompts, and transformers' greedy tokens for each (fp32, CPU)."""
    path = next_checkpoint("moe-shared-expert")
    prompts = prompts_of(LENS, 31)
    oracle = Oracle(path, torch.float32)
    return path, prompts, [oracle.greedy(p, n) for p, n in zip(prompts, LIMITS)]


def serve(path: Path, **kw: object) -> LLM:
    args = {"max_num_seqs": 3, "max_model_len": 96, "block_size": 8, "max_num_batched_tokens": 24, **kw}
    return LLM(path, "float32", "cpu", **args)  # type: ignore[arg-type]


def params() -> list[SamplingParams]:
    return [SamplingParams(max_tokens=n, **GREEDY) for n in LIMITS]


def test_greedy_tokens_equal_transformers_through_batching_chunks_and_preemption(case) -> None:
    path, prompts, theirs = case
    # 9 requests through 3 sequences; a 24-token budget chunks the 33-, 58- and 70-token prompts (the state
    # carried from chunk to chunk); 16 blocks of 8 are short of three long sequences at once: preemption
    llm = serve(path, num_blocks=16)
    kernels.reset_counts()
    outs = llm.generate(prompts, params())
    assert [o.token_ids for o in outs] == theirs
    assert all(len(set(t)) > 2 for t in theirs if len(t) > 6), theirs  # teeth: not one repeated token
    stats = llm.stats
    assert stats["preemptions"] > 0, stats
    assert stats["decode_steps"] > 0 and stats["steps"] > stats["decode_steps"], stats  # decode and mixed steps
    ran = kernels.counts().ran
    assert ran[("gated_delta_decode", "reference")] > 0 and ran[("gated_delta_chunked", "reference")] > 0
    llm.scheduler.check_empty()
    # the engine serves again from slots that held the last run's states
    assert [o.token_ids for o in llm.generate(prompts[::-1], params()[::-1])] == theirs[::-1]
    llm.scheduler.check_empty()


def test_async_scheduling_carries_the_state_as_the_synchronous_steps(case) -> None:
    """VT_ASYNC_SCHEDULE (each decode step read back after the next is staged): the same tokens, preempted."""
    from engine.flags import FlagSnapshot

    path, prompts, theirs = case
    llm = serve(path, num_blocks=16, flags=FlagSnapshot.from_env().with_(VT_ASYNC_SCHEDULE=True))
    assert [o.token_ids for o in llm.generate(prompts, params())] == theirs
    assert llm.stats["preemptions"] > 0
    llm.scheduler.check_empty()


def test_one_step_per_prompt_and_a_roomy_cache_give_the_same_tokens(case) -> None:
    path, prompts, theirs = case
    llm = serve(path, max_num_seqs=9, max_num_batched_tokens=2048)  # every prompt whole, no preemption
    assert [o.token_ids for o in llm.generate(prompts, params())] == theirs
    assert llm.stats["preemptions"] == 0
    llm.scheduler.check_empty()


def test_prefix_caching_is_off_for_a_recurrent_model(case) -> None:
    path, _, _ = case
    shared = prompts_of((40,), 32)[0]
    prompts = [shared + p for p in prompts_of((3, 7), 33)]
    oracle = Oracle(path, torch.float32)
    llm = serve(path, max_num_seqs=1)  # enable_prefix_caching=True by default: refused for this model
    assert llm.prefix_caching is False and llm.runner.blocks.prefix_caching is False
    outs = llm.generate(prompts, SamplingParams(max_tokens=6, **GREEDY))
    assert [o.num_cached_tokens for o in outs] == [0, 0]
    assert [o.token_ids for o in outs] == [oracle.greedy(p, 6) for p in prompts]


@pytest.mark.parametrize("fail_at", [0, 1, 2, 5, 9, 14])
def test_an_error_at_any_step_frees_every_block_and_state_slot(case, monkeypatch, fail_at: int) -> None:
    path, prompts, theirs = case
    llm = serve(path, num_blocks=16)
    real, calls = llm.runner.run_step, []

    def failing(rows, decode):  # type: ignore[no-untyped-def]
        calls.append(len(rows))
        if len(calls) == fail_at + 1:
            raise RuntimeError("device lost")
        return real(rows, decode)

    monkeypatch.setattr(llm.runner, "run_step", failing)
    with pytest.raises(RuntimeError, match="device lost"):
        llm.generate(prompts, params())
    llm.scheduler.check_empty()
    assert not llm.has_unfinished_requests()
    monkeypatch.setattr(llm.runner, "run_step", real)
    assert [o.token_ids for o in llm.generate(prompts, params())] == theirs  # stale states never read


def test_a_one_token_prompt_in_a_reused_slot_starts_from_zeros(case, monkeypatch) -> None:
    """A one-token prompt runs the delta net's decode path from its slot's state: the runner zeroes the slot
    at token 0. Seeded violation: without the reset it reads the previous sequence's state and parts."""
    path, prompts, theirs = case
    first, one = prompts[3], prompts[0]  # 58 tokens, then a 1-token prompt in the same (only) slot
    assert len(one) == 1
    llm = serve(path, max_num_seqs=1)
    outs = llm.generate([first, one], [SamplingParams(max_tokens=n, **GREEDY) for n in (LIMITS[3], LIMITS[0])])
    assert [o.token_ids for o in outs] == [theirs[3], theirs[0]]
    monkeypatch.setattr(llm.runner, "reset_states", lambda rows: None)
    outs = llm.generate([first, one], [SamplingParams(max_tokens=n, **GREEDY) for n in (LIMITS[3], LIMITS[0])])
    assert outs[1].token_ids != theirs[0]


def test_the_state_carried_across_chunks_is_what_the_gate_checks(case, monkeypatch) -> None:
    """Seeded violation: a prompt chunk that restarts from a zero state (the state dropped between chunks)
    gives other tokens than transformers'."""
    from engine.model import qwen3_next

    path, prompts, theirs = case
    real = qwen3_next.Qwen3NextGatedDeltaNet._prefill

    def dropped(self, mixed, decay, beta, batch):  # type: ignore[no-untyped-def]
        return real(self, mixed, decay, beta, dataclasses.replace(batch, prefix_lens=None))  # every chunk from zeros

    monkeypatch.setattr(qwen3_next.Qwen3NextGatedDeltaNet, "_prefill", dropped)
    outs = serve(path, max_num_seqs=9).generate(prompts, params())
    chunked = [i for i, n in enumerate(LENS) if n > 24]
    assert all(outs[i].token_ids != theirs[i] for i in chunked)


# on the GPU: the gated delta net kernel and the MoE kernels; at the default flags the MoE experts run their
# routed arm (no host read, so the decode step is captured all the same)
GDN_ARMS = {"VT_GDN_KERNEL": True, "VT_MOE_KERNELS": True}


@pytest.mark.gpu
@pytest.mark.parametrize(
    "model, arms",
    [("dense-mlp-rope-half", {}), ("moe-shared-expert", {}), ("moe-shared-expert", GDN_ARMS), ("d128", GDN_ARMS)],
)
def test_graphed_serving_equals_transformers_on_the_gpu(next_checkpoint, model: str, arms: dict) -> None:
    """fp32 on the GPU: LLM.generate's greedy tokens equal transformers' generate on the same device through
    batching, chunked prefill and preemption; the decode steps ran as captured graphs (with the GDN kernels'
    counters nonzero when they are on); then bf16 graphed equals bf16 eager."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the graphed serving step needs one")
    from engine.flags import FlagSnapshot

    torch.backends.cudnn.allow_tf32 = False  # both sides' depthwise convolutions in true fp32
    path = next_checkpoint(model)
    prompts = prompts_of(LENS, 41)
    oracle = Oracle(path, torch.float32, device="cuda")
    theirs = [oracle.greedy(p, n) for p, n in zip(prompts, LIMITS)]
    flags = FlagSnapshot.defaults().with_(**arms)
    kernels.reset_counts()
    llm = LLM(path, "float32", "cuda", max_num_seqs=3, max_model_len=96, block_size=8, num_blocks=16,
              max_num_batched_tokens=24, flags=flags)  # fmt: skip
    outs = [o.token_ids for o in llm.generate(prompts, params())]
    seen = kernels.counts()
    print(f"{model} fp32 {sorted(arms) or 'defaults'}: stats={llm.stats} graphs={llm.runner.captured}")
    print(kernels.render_counts(seen))
    assert outs == theirs
    assert llm.runner.use_graph and llm.runner.captured, "the decode step fell back to eager"
    assert llm.stats["preemptions"] > 0 and llm.stats["decode_steps"] > 0
    if arms:
        assert kernels.arms_ran("VT_GDN_KERNEL", seen) > 0
    elif model == "moe-shared-expert":
        assert seen.ran[("moe_experts", "routed")] > 0 and seen.ran[("moe_experts", "reference")] == 0
    llm.scheduler.check_empty()
    runs = []
    for eager in (False, True):
        bf16 = LLM(path, "bfloat16", "cuda", max_num_seqs=3, max_model_len=96, block_size=8, num_blocks=16,
                   max_num_batched_tokens=24, flags=flags.with_(VT_EAGER=eager))  # fmt: skip
        runs.append([o.token_ids for o in bf16.generate(prompts, params())])
        assert bool(bf16.runner.captured) is not eager
        bf16.scheduler.check_empty()
    assert runs[0] == runs[1], "bf16: the graphed serving steps give other tokens than the eager ones"
