"""engine.penalties against plain-Python references of vLLM's definitions; min_p, min_tokens and penalties end to end."""

from __future__ import annotations

import math
import random

import pytest
import torch

from engine import LLM, SamplingParams
from engine.llm import TINY_MODEL
from engine.penalties import RowProcessors, apply, pack

VOCAB = 97


def reference(logits: list[float], r: RowProcessors, temperature: float) -> list[float]:
    """vLLM's apply_penalties and min_p, one token at a time."""
    out = list(logits)
    seen = set(r.prompt) | set(r.output)
    for t in range(len(out)):
        if t in seen:
            out[t] = out[t] / r.repetition if out[t] > 0 else out[t] * r.repetition
        count = list(r.output).count(t)
        out[t] -= r.frequency * count + r.presence * (count > 0)
        if t in r.banned:
            out[t] = -math.inf
    if r.min_p > 0:
        t_ = temperature if temperature > 0 else 1.0
        probs = torch.softmax(torch.tensor(out) / t_, dim=-1).tolist()
        top = max(probs)
        out = [-math.inf if p < r.min_p * top else x for p, x in zip(probs, out)]
    return out


@pytest.mark.parametrize("seed", range(6))
def test_apply_matches_vllms_definitions(seed: int) -> None:
    rng = random.Random(seed)
    rows = []
    for i in range(5):
        rows.append(
            None
            if i == 3
            else RowProcessors(
                presence=rng.uniform(-2, 2),
                frequency=rng.uniform(-2, 2),
                repetition=rng.choice([1.0, rng.uniform(0.5, 2)]),
                min_p=rng.choice([0.0, rng.uniform(0.01, 0.5)]),
                prompt=[rng.randrange(VOCAB) for _ in range(rng.randint(1, 30))],
                output=[rng.randrange(VOCAB) for _ in range(rng.randint(0, 30))],
                banned=frozenset(rng.sample(range(VOCAB), rng.randint(0, 3))),
            )
        )
    logits = torch.randn(5, VOCAB, generator=torch.Generator().manual_seed(seed)) * 3
    temps = torch.tensor([0.0, 0.7, 1.0, 1.3, 2.0])
    packed = pack(rows, 5, VOCAB)
    got = apply(logits, temps, *packed.values())
    for i, r in enumerate(rows):
        want = reference(logits[i].tolist(), r or RowProcessors(), temps[i].item())
        for g, w in zip(got[i].tolist(), want):
            assert (g == w == -math.inf) or math.isclose(g, w, rel_tol=1e-6, abs_tol=1e-5), (i, g, w)


def test_a_row_without_processors_is_untouched() -> None:
    logits = torch.randn(3, VOCAB)
    packed = pack([None, RowProcessors(), None], 3, VOCAB)
    assert torch.equal(apply(logits, torch.ones(3), *packed.values(), penalize=False), logits)


@torch.inference_mode()
def test_greedy_with_penalties_follows_the_reference_decode() -> None:
    transformers = pytest.importorskip("transformers", reason="the reference decode runs transformers' logits")
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(TINY_MODEL), dtype=torch.float32).eval()
    prompt = [11, 12, 13, 11, 12, 13, 40]
    sp = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, presence_penalty=0.8, frequency_penalty=0.6,
                        repetition_penalty=1.4)  # fmt: skip
    got = LLM(max_model_len=64).generate([prompt], sp)[0].token_ids
    r = RowProcessors(0.8, 0.6, 1.4, 0.0, prompt, [])
    want: list[int] = []
    for _ in range(12):
        logits = hf(input_ids=torch.tensor([prompt + want])).logits[0, -1].tolist()
        out = reference(logits, RowProcessors(r.presence, r.frequency, r.repetition, 0.0, prompt, want), 0.0)
        want.append(max(range(len(out)), key=out.__getitem__))
    assert got == want
    plain = LLM(max_model_len=64).generate([prompt], SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))
    assert plain[0].token_ids != got  # the penalties changed the decode


def test_min_p_keeps_only_tokens_near_the_top() -> None:
    llm = LLM(max_model_len=128)
    min_p = 0.2
    outs = llm.generate(
        [[3, 4, 5], [9, 8, 7, 6]],
        SamplingParams(temperature=1.0, min_p=min_p, seed=11, max_tokens=40, ignore_eos=True, logprobs=1),
    )
    for out in outs:
        for token, pos in zip(out.token_ids, out.logprobs or []):
            assert pos is not None
            best = max(lp.logprob for lp in pos.values())
            assert pos[token].logprob >= best + math.log(min_p) - 1e-6  # at T=1 the raw distribution is min_p's
    loose = llm.generate([[3, 4, 5]], SamplingParams(temperature=1.0, seed=11, max_tokens=40, ignore_eos=True,
                                                     logprobs=1))[0]  # fmt: skip
    ratios = [p[t].logprob - max(x.logprob for x in p.values()) for t, p in zip(loose.token_ids, loose.logprobs or [])
              if p is not None]  # fmt: skip
    assert min(ratios) < math.log(min_p)  # without min_p such tokens are drawn: the test can fail


def test_min_tokens_bans_the_stop_tokens_until_reached() -> None:
    llm = LLM(max_model_len=128)
    prompt = [21, 22, 23]
    plain = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=10, ignore_eos=True))[0].token_ids
    stop = plain[1]
    early = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=10, stop_token_ids=[stop]))[0]
    assert len(early.token_ids) <= 2 and early.finish_reason == "stop"
    held = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=10, stop_token_ids=[stop], min_tokens=6))[0]
    assert stop not in held.token_ids[:6] and len(held.token_ids) >= 6
    llm.runner.blocks.check_empty()
