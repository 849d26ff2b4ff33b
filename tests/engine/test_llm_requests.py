"""engine.LLM as a vLLM user drives it: requests belong to their caller, n, stop strings, streaming, abort,
metrics, tiny temperatures and the KV cache's memory budget."""

from __future__ import annotations

import pytest

from engine import LLM, SamplingParams
from engine.llm import kv_block_bytes

GREEDY = {"temperature": 0.0, "ignore_eos": True}


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM(max_model_len=128, max_num_seqs=4)


def test_generate_returns_only_its_own_requests_and_waits_for_them(llm: LLM) -> None:
    other = llm.add_request([1, 2, 3], SamplingParams(max_tokens=2, **GREEDY))
    mine = [[7, 8, 9], [4, 5]]
    alone = LLM(max_model_len=128).generate(mine, SamplingParams(max_tokens=9, **GREEDY))
    outs = llm.generate(mine, SamplingParams(max_tokens=9, **GREEDY))
    assert [o.index for o in outs] == [0, 1]
    assert [o.token_ids for o in outs] == [o.token_ids for o in alone]
    assert all(o.finished and len(o.token_ids) == 9 for o in outs)
    # the queued request finished during generate(): its owner gets it from the next step()
    waiting = llm.step()
    assert [(o.index, len(o.token_ids), o.request_id) for o in waiting] == [(other, 2, str(other))]
    assert llm.step() == [] and not llm.has_unfinished_requests()
    llm.runner.blocks.check_empty()


def test_a_temperature_below_1e_5_is_greedy(llm: LLM) -> None:
    prompt = [30, 31, 32]
    greedy = llm.generate([prompt], SamplingParams(max_tokens=8, **GREEDY))[0].token_ids
    tiny = llm.generate([prompt], SamplingParams(temperature=1e-40, max_tokens=8, ignore_eos=True, seed=1))[0]
    assert tiny.token_ids == greedy


def test_n_samples_from_seeds_derived_from_the_request_seed(llm: LLM) -> None:
    sp = SamplingParams(n=3, temperature=1.0, seed=7, max_tokens=10, ignore_eos=True)
    out = llm.generate([[5, 6]], sp)[0]
    assert [c.index for c in out.outputs] == [0, 1, 2]
    samples = [c.token_ids for c in out.outputs]
    assert len({tuple(s) for s in samples}) == 3
    one = llm.generate([[5, 6]], SamplingParams(temperature=1.0, seed=7, max_tokens=10, ignore_eos=True))[0]
    assert samples[0] == one.token_ids == out.token_ids
    assert [c.token_ids for c in llm.generate([[5, 6]], sp)[0].outputs] == samples  # reproducible


def test_a_stop_string_cuts_the_text_before_it(llm: LLM) -> None:
    prompt = "Once upon a time"
    full = llm.generate(prompt, SamplingParams(max_tokens=24, **GREEDY))[0]
    assert full.text is not None and len(full.text) > 12
    stop = full.text[6:9]
    cut = llm.generate(prompt, SamplingParams(max_tokens=24, stop=[stop, "zzzz"], **GREEDY))[0]
    at = full.text.index(stop)
    assert (cut.text, cut.finish_reason, cut.outputs[0].stop_reason) == (full.text[:at], "stop", stop)
    assert len(cut.token_ids) < len(full.token_ids)
    kept = llm.generate(prompt, SamplingParams(max_tokens=24, stop=stop, include_stop_str_in_output=True, **GREEDY))
    assert kept[0].text == full.text[: at + len(stop)]


def test_streamed_deltas_concatenate_to_the_whole_output(llm: LLM) -> None:
    prompts = ["Once upon a time", "The cat"]
    whole = llm.generate(prompts, SamplingParams(max_tokens=20, logprobs=1, **GREEDY))
    full_text = whole[0].text or ""
    stop = full_text[8:11]
    params = [SamplingParams(max_tokens=20, logprobs=1, **GREEDY), SamplingParams(max_tokens=20, stop=stop, **GREEDY)]
    whole = llm.generate(prompts, params)
    texts, tokens, lps, finished = ["", ""], [[], []], [[], []], [0, 0]
    count = 0
    for out in llm.stream(prompts, params):
        count += 1
        texts[out.index] += out.text or ""
        tokens[out.index] += out.token_ids
        lps[out.index] += out.outputs[0].logprobs or []
        finished[out.index] += out.finished
    assert count > 4 and finished == [1, 1]
    assert texts == [o.text for o in whole] and tokens == [o.token_ids for o in whole]
    assert [p.keys() for p in lps[0]] == [p.keys() for p in whole[0].logprobs or []]
    llm.runner.blocks.check_empty()


def test_abort_frees_the_blocks_at_once(llm: LLM) -> None:
    rid = llm.add_request([1, 2, 3, 4], SamplingParams(max_tokens=50, **GREEDY), request_id="a")
    for _ in range(3):
        llm.step()
    assert llm.runner.blocks.num_free < llm.runner.blocks.num_blocks
    assert llm.abort("a") and not llm.abort("a")
    llm.runner.blocks.check_empty()
    (out,) = llm.step()
    assert (out.index, out.finish_reason, out.request_id) == (rid, "abort", "a") and 0 < len(out.token_ids) < 50
    # closing a stream early aborts what it started
    stream = llm.stream([[5, 6, 7]], SamplingParams(max_tokens=50, **GREEDY))
    next(stream)
    stream.close()
    llm.runner.blocks.check_empty()
    assert not llm.has_unfinished_requests()


def test_metrics_time_the_first_token_and_the_rest(llm: LLM) -> None:
    out = llm.generate([[9, 9, 9]], SamplingParams(max_tokens=6, **GREEDY))[0]
    m = out.metrics
    assert m is not None and m.first_token_time is not None and m.finished_time is not None
    assert m.arrival_time <= m.first_token_time <= m.finished_time
    ttft, tpot = m.ttft, m.tpot(len(out.token_ids))
    assert ttft is not None and ttft >= 0 and tpot is not None and tpot >= 0


def test_the_kv_cache_is_sized_from_its_memory_budget(capsys: pytest.CaptureFixture[str]) -> None:
    small = LLM(max_model_len=128, max_num_seqs=4, kv_cache_memory=10 * 1024 * 1024)
    per_block = kv_block_bytes(small.config, small.runner.dtype, 16)
    assert small.runner.blocks.num_blocks == min(10 * 1024 * 1024 // per_block, 4 * 8)
    tiny = LLM(max_model_len=128, max_num_seqs=4, kv_cache_memory=3 * per_block)
    assert tiny.runner.blocks.num_blocks == 3
    assert "engine: KV cache of 3 blocks x 16 = 48 tokens" in capsys.readouterr().err
    with pytest.raises(ValueError, match="prompt \\+ max_tokens need 4 KV blocks, the cache has num_blocks=3"):
        tiny.generate([[1] * 40], SamplingParams(max_tokens=20))
    with pytest.raises(ValueError, match="holds no KV block"):
        LLM(max_model_len=128, kv_cache_memory=per_block - 1)


def flat(positions: list | None) -> list[tuple[tuple[int, int], float]]:
    """Logprob dicts as ((position, token), logprob) pairs in order."""
    return [((i, t), lp.logprob) for i, p in enumerate(positions or []) if p for t, lp in p.items()]


def test_the_overlapped_and_the_synchronous_step_agree_on_every_feature() -> None:
    from engine.flags import FlagSnapshot

    params = [
        SamplingParams(temperature=0.9, seed=1, max_tokens=12, logprobs=3, presence_penalty=1.0, ignore_eos=True),
        SamplingParams(temperature=0, max_tokens=12, repetition_penalty=1.5, frequency_penalty=0.5, min_tokens=4),
        SamplingParams(temperature=1.2, seed=2, n=2, max_tokens=12, min_p=0.1, prompt_logprobs=2, ignore_eos=True),
        SamplingParams(temperature=0, max_tokens=12, stop=["e"], logprobs=0),
    ]
    prompts = [[5, 6, 7, 5, 6], "Once upon a time", [9] * 20, "The cat"]
    runs = []
    for overlap in (False, True):
        flags = FlagSnapshot.from_env().with_(VT_ASYNC_SCHEDULE=overlap)
        llm = LLM(max_model_len=128, max_num_seqs=3, max_num_batched_tokens=8, flags=flags)  # chunked, queued
        outs = llm.generate(prompts, params)
        runs.append(
            [
                (c.token_ids, c.text, c.finish_reason, flat(c.logprobs), flat(o.prompt_logprobs))
                for o in outs
                for c in o.outputs
            ]
        )
        llm.runner.blocks.check_empty()
    # tokens, text and finish exactly; logprobs to fp32 noise (the two paths batch rows differently, and a
    # batch's shape moves fp32 sums by ulps)
    assert [r[:3] for r in runs[0]] == [r[:3] for r in runs[1]]
    for a, b in zip(runs[0], runs[1]):
        for x, y in ((a[3], b[3]), (a[4], b[4])):
            assert [k for k, _ in x] == [k for k, _ in y]
            assert all(abs(p - q) < 1e-4 for (_, p), (_, q) in zip(x, y))
    assert all(r[0] for r in runs[0]) and all(r[3] for r in runs[0][:1]) and runs[0][2][4]


def test_an_abort_leaves_a_finished_samples_reason(llm: LLM) -> None:
    sp = SamplingParams(n=2, temperature=1.0, seed=4, max_tokens=40, ignore_eos=True)
    rid = llm.add_request([3, 1, 4], sp, request_id="two")
    llm.step()
    seqs = [s for s in llm.scheduler.running if s.index == rid]
    llm.scheduler.finish(seqs[0], "length")  # one sample done, as a length limit would end it
    llm.abort("two")
    (out,) = [o for o in llm.step() if o.request_id == "two"]
    assert sorted(c.finish_reason for c in out.outputs) == ["abort", "length"]
    llm.runner.blocks.check_empty()
