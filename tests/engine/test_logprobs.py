"""Logprobs held to transformers' log_softmax in fp32: sampled-token, top-k, rank, prompt and cumulative.

One sequence at a time, the engine's decode step is transformers' `generate` bitwise (measured: 0.0 over 16
steps): the same GEMV per linear (one row), the same eager attention over exactly the sequence's keys. Two
things of transformers' own move its fp32 logits by more than 1e-5, and the references here avoid both:
- `from_pretrained` leaves weights at the safetensors file's offsets, not 64-byte aligned, and MKL's GEMV
  rounds a misaligned weight differently (up to 7e-5 in the logprobs); the reference holds aligned copies.
- a forward over the whole sequence runs every linear as a GEMM of many rows, which sums in another order
  than the one-row GEMV of a decode step: transformers' full forward and its own `generate` differ by up to
  1.3e-4 on the same tokens. A batched engine step (a GEMM of its rows) or a chunked prefill meets the same,
  so those are held to 1e-4; a one-step prefill is the full forward's GEMM and is held to 1e-5.
The logprob computation itself adds nothing: it is one log_softmax of the same fp32 logits.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from engine import LLM, SamplingParams
from engine.llm import TINY_MODEL

EXACT_FORWARD = 1e-5  # the bound: decode steps one sequence at a time, prompt logprobs of a one-step prefill
OTHER_FORWARD = 1e-4  # a batched step or a chunked prefill against the one-sequence full forward


@pytest.fixture(scope="module")
def hf() -> torch.nn.Module:
    transformers = pytest.importorskip("transformers", reason="the oracle is transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(TINY_MODEL), dtype=torch.float32, attn_implementation="eager", local_files_only=True
    )
    return model.eval()


@pytest.fixture(scope="module")
def hf_aligned(hf: torch.nn.Module) -> torch.nn.Module:
    """The same model with every weight copied into torch's own (64-byte aligned) memory."""
    transformers = pytest.importorskip("transformers", reason="the oracle is transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(TINY_MODEL), dtype=torch.float32, attn_implementation="eager", local_files_only=True
    )
    for p in model.parameters():
        p.data = p.data.clone()
    assert {p.data_ptr() % 64 for p in model.parameters()} == {0}
    return model.eval()


@torch.inference_mode()
def hf_generate_logprobs(hf: torch.nn.Module, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """[len(tokens), vocab]: what `generate` computes, teacher-forced on `tokens`: the prompt's forward keeping
    the last position's logits only (generate's logits_to_keep=1), then one token per step on the KV cache."""
    out = hf(input_ids=torch.tensor([prompt]), use_cache=True, logits_to_keep=1)
    rows = [out.logits[0, -1]]
    for t in tokens[:-1]:
        out = hf(input_ids=torch.tensor([[t]]), past_key_values=out.past_key_values, use_cache=True)
        rows.append(out.logits[0, -1])
    return torch.log_softmax(torch.stack(rows).float(), dim=-1)


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


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_generated_logprobs_equal_transformers_generate_one_sequence_at_a_time(
    hf_aligned: torch.nn.Module, temperature: float
) -> None:
    ps = prompts(3, 2, 20, 40)
    llm = LLM(max_model_len=128, max_num_seqs=1)
    sp = SamplingParams(temperature=temperature, seed=5, max_tokens=16, ignore_eos=True, logprobs=20)
    for prompt, out in zip(ps, llm.generate(ps, sp)):
        ref = hf_generate_logprobs(hf_aligned, prompt, out.token_ids)
        assert out.logprobs is not None and len(out.logprobs) == 16
        for t, pos in enumerate(out.logprobs):
            assert pos is not None and len(pos) >= 20
            worst = max(abs(lp.logprob - ref[t, i].item()) for i, lp in pos.items())
            assert worst <= EXACT_FORWARD, (t, worst)


def test_the_reference_is_transformers_generate(hf_aligned: torch.nn.Module) -> None:
    """The teacher-forced reference above computes generate's own logits (greedy, where generate picks the
    same tokens): bitwise."""
    prompt = prompts(1, 3, 20, 40)[0]
    with torch.inference_mode():
        g = hf_aligned.generate(
            torch.tensor([prompt]), do_sample=False, max_new_tokens=8, min_new_tokens=8, output_logits=True,
            return_dict_in_generate=True, pad_token_id=0,
        )  # fmt: skip
    tokens = g.sequences[0, len(prompt) :].tolist()
    assert torch.equal(
        torch.log_softmax(torch.cat(g.logits).float(), dim=-1), hf_generate_logprobs(hf_aligned, prompt, tokens)
    )


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
