"""Logprobs held to transformers' log_softmax in fp32: sampled-token, top-k, rank, prompt and cumulative.

A whole prompt prefilled in one step is bitwise transformers' eager forward, so its prompt logprobs are held
to 1e-5; a decode step (and a chunk reading a cached prefix) sums attention in its own order, and its
logits differ from transformers' by up to about 8e-5 on the tiny model (measured), so those are held to 1e-4.
The logprob computation itself adds nothing: it is one log_softmax of the same fp32 logits.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from engine import LLM, SamplingParams
from engine.llm import TINY_MODEL

EXACT_FORWARD = 1e-5  # prompt logprobs of a one-step prefill
OTHER_FORWARD = 1e-4  # decode steps and chunked prefills


@pytest.fixture(scope="module")
def hf() -> torch.nn.Module:
    transformers = pytest.importorskip("transformers", reason="the oracle is transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(TINY_MODEL), dtype=torch.float32, attn_implementation="eager", local_files_only=True
    )
    return model.eval()


@torch.inference_mode()
def hf_logprobs(hf: torch.nn.Module, ids: list[int]) -> torch.Tensor:  # -> [len(ids), vocab]: position i predicts i+1
    logits = hf(input_ids=torch.tensor([ids])).logits[0]
    return torch.log_softmax(logits.float(), dim=-1)


def prompts(n: int, seed: int, lo: int, hi: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(512) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


@pytest.mark.parametrize(("temperature", "budget"), [(0.0, 2048), (0.8, 2048), (0.0, 16)])
def test_generated_and_prompt_logprobs_equal_transformers(hf: torch.nn.Module, temperature: float, budget: int) -> None:
    ps = prompts(3, 1, 20, 40)
    # a step budget of 16 chunks the prompts: their prompt logprobs come from several steps
    llm = LLM(max_model_len=128, max_num_seqs=3, max_num_batched_tokens=budget)
    tol = EXACT_FORWARD if budget > 40 else OTHER_FORWARD
    params = [
        SamplingParams(temperature=temperature, top_k=5, seed=3, max_tokens=8, ignore_eos=True, logprobs=k,
                       prompt_logprobs=pk)
        for k, pk in ((5, 3), (0, 0), (20, None))
    ]  # fmt: skip
    outs = llm.generate(ps, params)
    for prompt, sp, out in zip(ps, params, outs):
        ref = hf_logprobs(hf, prompt + out.token_ids)
        assert out.logprobs is not None and len(out.logprobs) == len(out.token_ids) == 8
        total = 0.0
        for t, (token, pos) in enumerate(zip(out.token_ids, out.logprobs)):
            row = ref[len(prompt) - 1 + t]
            assert pos is not None
            assert math.isclose(pos[token].logprob, row[token].item(), abs_tol=OTHER_FORWARD)
            assert pos[token].rank == int((row > row[token]).sum()) + 1
            total += pos[token].logprob
            top = row.topk(sp.logprobs or 1)
            want = dict(zip(top.indices.tolist()[: sp.logprobs], top.values.tolist()[: sp.logprobs]))
            got = {i: lp.logprob for i, lp in pos.items() if i in want or lp.rank <= (sp.logprobs or 0)}
            assert got.keys() == want.keys()
            assert all(math.isclose(got[i], want[i], abs_tol=OTHER_FORWARD) for i in want)
            assert len(pos) in (sp.logprobs or 0, (sp.logprobs or 0) + 1)  # the top-k, and the chosen one
            assert pos[token].decoded_token == llm.tokenizer.decode([token], skip_special_tokens=False)
        assert out.cumulative_logprob is not None and math.isclose(out.cumulative_logprob, total, abs_tol=1e-9)
        if sp.prompt_logprobs is None:
            assert out.prompt_logprobs is None
            continue
        assert out.prompt_logprobs is not None and len(out.prompt_logprobs) == len(prompt)
        assert out.prompt_logprobs[0] is None
        for j in range(1, len(prompt)):
            pos = out.prompt_logprobs[j]
            assert pos is not None
            assert math.isclose(pos[prompt[j]].logprob, ref[j - 1][prompt[j]].item(), abs_tol=tol)
            assert len(pos) in (sp.prompt_logprobs, sp.prompt_logprobs + 1)
    llm.runner.blocks.check_empty()


def test_greedy_picks_the_top_logprob_and_no_logprobs_means_none() -> None:
    llm = LLM(max_model_len=64)
    out, plain = llm.generate(
        [[5, 6, 7], [5, 6, 7]],
        [SamplingParams(temperature=0, max_tokens=5, logprobs=2), SamplingParams(temperature=0, max_tokens=5)],
    )
    assert out.token_ids == plain.token_ids  # asking for logprobs changes no token
    assert all(p is not None and p[t].rank == 1 for t, p in zip(out.token_ids, out.logprobs or []))
    assert plain.logprobs is None and plain.cumulative_logprob is None and plain.prompt_logprobs is None


def test_prompt_logprobs_skip_the_prefix_cache() -> None:
    llm = LLM(max_model_len=128, max_num_seqs=1)
    prefix = list(range(40, 80))
    llm.generate([prefix + [1]], SamplingParams(temperature=0, max_tokens=2))
    cached, judged = llm.generate(
        [prefix + [2], prefix + [3]],
        [SamplingParams(temperature=0, max_tokens=2), SamplingParams(temperature=0, max_tokens=2, prompt_logprobs=1)],
    )
    assert cached.num_cached_tokens == 32 and judged.num_cached_tokens == 0
    assert judged.prompt_logprobs is not None and all(p is not None for p in judged.prompt_logprobs[1:])


def test_a_logprobs_request_past_the_limit_is_refused() -> None:
    with pytest.raises(ValueError, match=r"request 0: SamplingParams.logprobs=21 must be None or in \[0, 20\]"):
        LLM(max_model_len=64).generate([[1, 2]], SamplingParams(logprobs=21))
