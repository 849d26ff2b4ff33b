"""engine.LLM: scheduled requests give the tokens of solo greedy runs; stops, seeds, text, preemption, prefix cache."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import torch

from engine import LLM, SamplingParams
from engine.llm import TINY_MODEL
from engine.sampler import Mode
from lab.drive import greedy_tokens

GREEDY = {"temperature": 0.0, "ignore_eos": True}


def random_prompts(n: int, seed: int, lo: int = 1, hi: int = 40) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(512) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


@pytest.fixture(scope="module")
def solo() -> LLM:
    """One request at a time, nothing cached between them: the reference each scheduled run must equal."""
    return LLM(max_num_seqs=1, max_model_len=128, enable_prefix_caching=False)


def solo_tokens(llm: LLM, prompt: list[int], n: int) -> list[int]:
    return llm.generate([prompt], SamplingParams(max_tokens=n, **GREEDY))[0].token_ids


def test_ten_requests_through_three_slots_give_the_solo_greedy_tokens(solo: LLM) -> None:
    prompts = random_prompts(10, 1)
    limits = [random.Random(2).randint(1, 20) for _ in range(10)]
    llm = LLM(max_num_seqs=3, max_model_len=128, max_num_batched_tokens=24)  # prompts of 25+ are chunked
    outs = llm.generate(prompts, [SamplingParams(max_tokens=m, **GREEDY) for m in limits])
    assert [o.index for o in outs] == list(range(10))
    assert [o.token_ids for o in outs] == [solo_tokens(solo, p, m) for p, m in zip(prompts, limits)]
    assert all(o.finish_reason == "length" for o in outs)
    assert max(map(len, prompts)) > 24 and llm.stats["decode_steps"] > 0
    assert llm.stats["steps"] > llm.stats["decode_steps"]  # mixed steps: prefill chunks beside decode rows
    llm.runner.blocks.check_empty()


def test_a_stop_token_ends_the_request_with_stop(solo: LLM) -> None:
    prompt = random_prompts(1, 3)[0]
    plain = solo_tokens(solo, prompt, 12)
    i = next(i for i in range(2, 12) if plain[i] not in plain[:i])
    llm = LLM(max_model_len=128)
    out = llm.generate(
        [prompt, prompt],
        [SamplingParams(max_tokens=12, stop_token_ids=[plain[i]], **GREEDY), SamplingParams(max_tokens=12, **GREEDY)],
    )
    assert (out[0].token_ids, out[0].finish_reason) == (plain[: i + 1], "stop")  # the stop token is kept
    assert (out[1].token_ids, out[1].finish_reason) == (plain, "length")


def test_the_generation_configs_eos_ends_a_request_unless_ignored(solo: LLM, tmp_path: Path) -> None:
    prompt = random_prompts(1, 4)[0]
    plain = solo_tokens(solo, prompt, 12)
    i = next(i for i in range(2, 12) if plain[i] not in plain[:i])
    model = tmp_path / "m"
    shutil.copytree(TINY_MODEL, model)
    gen = json.loads((model / "generation_config.json").read_text())
    (model / "generation_config.json").write_text(json.dumps({**gen, "eos_token_id": [7, plain[i]]}))
    llm = LLM(model, max_model_len=128)
    assert llm.eos_token_ids == {7, plain[i]}
    stop, past = llm.generate(
        [prompt, prompt],
        [SamplingParams(temperature=0, max_tokens=12), SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)],
    )
    assert (stop.token_ids, stop.finish_reason) == (plain[: i + 1], "stop")
    assert (past.token_ids, past.finish_reason) == (plain, "length")


def test_the_embedded_model_has_a_tokenizer_and_its_eos() -> None:
    llm = LLM()
    eos = json.loads((TINY_MODEL / "generation_config.json").read_text())["eos_token_id"]
    assert llm.eos_token_ids == {eos} and llm.tokenizer.token_to_id("<|endoftext|>") == eos
    out = llm.generate("Hello, world!", SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))[0]
    assert isinstance(out.text, str) and out.text == llm.tokenizer.decode(out.token_ids, skip_special_tokens=True)
    assert out.prompt_token_ids == llm.tokenizer.encode("Hello, world!").ids
    assert len(out.token_ids) == 6
    assert llm.tokenizer.decode(llm.tokenizer.encode("Hello, world!").ids) == "Hello, world!"


def test_a_seed_reproduces_its_sample_whatever_runs_beside_it() -> None:
    prompt = random_prompts(1, 5)[0]
    request = SamplingParams(temperature=1.0, top_p=0.95, seed=1234, max_tokens=12, ignore_eos=True)
    alone = LLM(max_model_len=128).generate([prompt], request)[0].token_ids
    others = random_prompts(4, 6)
    beside = (
        LLM(max_model_len=128, max_num_seqs=2)
        .generate(
            [*others[:2], prompt, *others[2:]],
            [
                SamplingParams(temperature=0.5, seed=1),
                SamplingParams(temperature=0),
                request,
                SamplingParams(top_k=3),
                SamplingParams(temperature=1.5, top_p=0.5),
            ],
        )[2]
        .token_ids
    )
    assert beside == alone
    reseeded = LLM(max_model_len=128).generate(
        [prompt, prompt],
        [SamplingParams(temperature=1.0, top_p=0.95, seed=s, max_tokens=12, ignore_eos=True) for s in (1235, 99)],
    )
    assert all(o.token_ids != alone for o in reseeded) and reseeded[0].token_ids != reseeded[1].token_ids


def test_temperature_zero_with_filters_is_the_greedy_run(solo: LLM) -> None:
    prompts = random_prompts(3, 7)
    outs = LLM(max_model_len=128).generate(
        prompts, SamplingParams(temperature=0, top_k=3, top_p=0.5, max_tokens=10, ignore_eos=True)
    )
    assert [o.token_ids for o in outs] == [solo_tokens(solo, p, 10) for p in prompts]


@pytest.mark.parametrize("num_blocks", range(4, 18))
def test_a_small_block_budget_completes_every_request_by_preemption(solo: LLM, num_blocks: int) -> None:
    # 6 requests of up to 12 + 16 tokens, blocks of 8: 4 blocks each at most, 17 for all of them at once;
    # below 10 blocks this workload must preempt (measured), from 17 it never needs to
    prompts = random_prompts(6, 8, 1, 12)
    limits = [16, 3, 9, 16, 1, 12]
    llm = LLM(max_num_seqs=6, max_model_len=64, num_blocks=num_blocks, block_size=8)
    outs = llm.generate(prompts, [SamplingParams(max_tokens=m, **GREEDY) for m in limits])
    assert [o.token_ids for o in outs] == [solo_tokens(solo, p, m) for p, m in zip(prompts, limits)]
    if num_blocks < 10:
        assert llm.stats["preemptions"] > 0
    if num_blocks >= 17:
        assert llm.stats["preemptions"] == 0
    llm.runner.blocks.check_empty()
    # a sampled request preempted and recomputed draws what it drew without preemption
    sampled = SamplingParams(temperature=0.9, seed=5, max_tokens=16, ignore_eos=True)
    roomy = LLM(max_model_len=64, block_size=8).generate(prompts, sampled)
    assert [o.token_ids for o in llm.generate(prompts, sampled)] == [o.token_ids for o in roomy]
    llm.runner.blocks.check_empty()


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("fail_at", [0, 1, 3, 6, 10])
def test_an_error_mid_run_frees_every_block(
    solo: LLM, monkeypatch: pytest.MonkeyPatch, fail_at: int, overlap: bool
) -> None:
    from engine.flags import FlagSnapshot

    flags = FlagSnapshot.from_env().with_(VT_ASYNC_SCHEDULE=overlap)
    llm = LLM(max_num_seqs=3, max_model_len=64, num_blocks=8, block_size=8, max_num_batched_tokens=10, flags=flags)
    prompts = random_prompts(5, 9, 5, 20)
    calls: list[str] = []

    def failing(name, real):  # type: ignore[no-untyped-def]
        def call(*args, **kwargs):  # type: ignore[no-untyped-def]
            calls.append(name)
            if len(calls) == fail_at + 1:
                raise RuntimeError("device lost")
            return real(*args, **kwargs)

        return call

    # every way a step reaches the device: a synchronous step, and an overlapped decode's launch and read-back
    for name in ("run_step", "launch_decode", "read_tokens"):
        monkeypatch.setattr(llm.runner, name, failing(name, getattr(llm.runner, name)))
    with pytest.raises(RuntimeError, match="device lost"):
        llm.generate(prompts, SamplingParams(max_tokens=12, **GREEDY))
    assert overlap or "launch_decode" not in calls
    assert not overlap or fail_at < 6 or {"launch_decode", "read_tokens"} <= set(calls), calls  # overlapped path
    llm.runner.blocks.check_empty()
    assert not llm.has_unfinished_requests()
    monkeypatch.undo()
    outs = llm.generate(prompts, SamplingParams(max_tokens=12, **GREEDY))  # the engine still serves
    assert [o.token_ids for o in outs] == [solo_tokens(solo, p, 12) for p in prompts]


def test_prefix_caching_computes_a_shared_prefix_once(solo: LLM) -> None:
    rng = random.Random(10)
    prefix = [rng.randrange(512) for _ in range(48)]  # 3 full blocks of 16
    prompts = [prefix + [rng.randrange(512) for _ in range(n)] for n in (5, 9, 1)]
    params = SamplingParams(max_tokens=6, **GREEDY)
    llm = LLM(max_num_seqs=1, max_model_len=128)
    outs = llm.generate(prompts, params)
    assert [o.num_cached_tokens for o in outs] == [0, 48, 48]
    assert llm.stats["prefix_cached_tokens"] == 96
    total = sum(len(p) + 6 - 1 for p in prompts)  # every prompt token and every generated token but the last
    assert llm.stats["computed_tokens"] == total - 96
    plain = LLM(max_num_seqs=1, max_model_len=128, enable_prefix_caching=False)
    assert [o.token_ids for o in plain.generate(prompts, params)] == [o.token_ids for o in outs]
    assert plain.stats["prefix_cached_tokens"] == 0 and plain.stats["computed_tokens"] == total
    assert [o.token_ids for o in outs] == [solo_tokens(solo, p, 6) for p in prompts]
    # the whole prompt cached: its last token is still computed, for its logits
    again = llm.generate([prompts[0][:48]], params)[0]
    assert again.num_cached_tokens == 32 and again.token_ids == solo_tokens(solo, prompts[0][:48], 6)
    llm.runner.blocks.check_empty()


@pytest.mark.parametrize(
    "prompt, params, message",
    [
        ([], SamplingParams(), "request 1: prompt is empty"),
        ([1, 512], SamplingParams(), r"request 1: prompt token id 512 outside the vocabulary \[0, 512\)"),
        ([1] * 64, SamplingParams(), "request 1: prompt of 64 tokens leaves no room in max_model_len=64"),
        ([1], SamplingParams(temperature=-0.5), r"request 1: SamplingParams.temperature=-0.5 must be >= 0"),
        ([1], SamplingParams(top_p=0.0), r"request 1: SamplingParams.top_p=0.0 must be in \(0, 1\]"),
        ([1], SamplingParams(top_p=1.5), r"request 1: SamplingParams.top_p=1.5 must be in \(0, 1\]"),
        ([1], SamplingParams(max_tokens=0), "request 1: SamplingParams.max_tokens=0 must be at least 1"),
        ([1], SamplingParams(top_k=-2), "request 1: SamplingParams.top_k=-2"),
        ([1], SamplingParams(stop_token_ids=[600]), "request 1: SamplingParams.stop_token_ids has 600"),
        ("text", None, None),  # a good text prompt: the control
    ],
)
def test_bad_input_names_the_request_and_field_and_fails_only_it(solo: LLM, prompt, params, message) -> None:
    llm = LLM(max_model_len=64)
    good = [3, 4, 5]
    if message is None:
        assert len(llm.generate([good, prompt], SamplingParams(max_tokens=2))) == 2
        return
    with pytest.raises(ValueError, match=message):
        llm.generate(
            [good, prompt, good],
            [SamplingParams(max_tokens=4, **GREEDY), params, SamplingParams(max_tokens=4, **GREEDY)],
        )
    assert not llm.has_unfinished_requests()  # nothing was queued
    # through add_request the bad one is refused and the others run to completion
    llm.add_request(good, SamplingParams(max_tokens=4, **GREEDY))
    with pytest.raises(ValueError, match=message.replace("request 1", "request 1")):
        llm.add_request(prompt, params)
    llm.add_request(good, SamplingParams(max_tokens=3, **GREEDY))
    outs = []
    while llm.has_unfinished_requests():
        outs += llm.step()
    assert sorted(len(o.token_ids) for o in outs) == [3, 4]
    assert all(o.token_ids == solo_tokens(solo, good, len(o.token_ids)) for o in outs)
    llm.runner.blocks.check_empty()


def test_a_request_needing_more_blocks_than_the_cache_is_refused() -> None:
    llm = LLM(max_model_len=64, num_blocks=2, block_size=8)
    with pytest.raises(
        ValueError,
        match=r"request 0: prompt \+ max_tokens need 3 KV blocks, the cache has "
        r"num_blocks=2",
    ):
        llm.generate([[1] * 10], SamplingParams(max_tokens=10))
    assert len(llm.generate([[1] * 10], SamplingParams(max_tokens=6))[0].token_ids) <= 6


def test_max_model_len_ends_a_request_with_length() -> None:
    out = LLM(max_model_len=20).generate([[1] * 15], SamplingParams(max_tokens=50, **GREEDY))[0]
    assert (len(out.token_ids), out.finish_reason) == (5, "length")


def test_cpu_threads_follow_the_model_size() -> None:
    from engine.runner import set_cpu_threads

    before = torch.get_num_threads()
    try:
        assert set_cpu_threads(64, {}) == 1 and torch.get_num_threads() == 1
        torch.set_num_threads(2)
        assert set_cpu_threads(64, {"OMP_NUM_THREADS": "3"}) == 2  # the user's setting wins
    finally:
        torch.set_num_threads(before)


@pytest.mark.gpu
def test_cuda_graph_steps_sample_deterministically() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the captured decode step needs one")
    prompts = random_prompts(6, 11)
    params = [
        SamplingParams(temperature=t, top_k=k, top_p=p, seed=s, max_tokens=24, ignore_eos=True)
        for t, k, p, s in [
            (0, -1, 1, 0),
            (0.8, -1, 1, 1),
            (1.0, 5, 1, 2),
            (0.7, -1, 0.9, 3),
            (1.2, 20, 0.8, 4),
            (0.0, 3, 0.5, 5),
        ]
    ]
    # no prefix cache: a second run's prefill must take the same shapes as the first's
    llm = LLM(device="cuda", dtype="bfloat16", max_model_len=128, num_blocks=64, enable_prefix_caching=False)
    first = [o.token_ids for o in llm.generate(prompts, params)]
    assert llm.runner.use_graph, "the sampling decode step fell back to eager: an op in it is not capturable"
    assert Mode.FILTERED in {mode for _, mode in llm.runner.captured}
    assert [o.token_ids for o in llm.generate(prompts, params)] == first  # replay is deterministic
    eager = LLM(device="cuda", dtype="bfloat16", max_model_len=128, num_blocks=64, enable_prefix_caching=False)
    eager.runner.use_graph = False
    assert [o.token_ids for o in eager.generate(prompts, params)] == first  # the graph samples what eager does
    # the greedy row equals an all-greedy run's over the same batch (the same padded GEMM shapes)
    assert first[0] == greedy_tokens(TINY_MODEL, prompts, 24, "bfloat16", "cuda")[0]


def assert_partings_are_near_ties(
    model: Path, prompts: list[list[int]], params: list[SamplingParams], ours: list[list[int]], base: list[list[int]]
) -> int:
    """Where two runs' tokens part, the oracle (transformers, eager, bf16, teacher-forced on the shared prefix)
    cannot separate the two tokens there: each is exact or a near tie by the razor (lab/gates/neartie.py),
    judged on the log-probs for a greedy row and on log-probs / T plus the request's Gumbel noise (what the
    sampler's argmax sees) for a sampled one. Returns how many requests parted."""
    from engine.sampler import gumbel, seed_bits
    from lab.gates.neartie import DEFAULT_BAND, DEFAULT_TOP_K, EXACT, NEAR_TIE, classify
    from lab.gates.oracle import Oracle

    oracle = None
    parted = 0
    for i, (a, b) in enumerate(zip(ours, base, strict=True)):
        if a == b:
            continue
        parted += 1
        at = next(k for k, (x, y) in enumerate(zip(a, b)) if x != y)
        oracle = oracle or Oracle(model, torch.bfloat16, "cuda")
        lp = oracle.teacher_forced_logprobs(prompts[i], a[: at + 1])[at]
        t = params[i].temperature
        if t > 0:
            seed, step = torch.tensor([seed_bits(params[i].seed or 0)]), torch.tensor([at])
            lp = torch.log_softmax(lp / t + gumbel(seed, step, lp.numel())[0], dim=-1)
        for tok in (a[at], b[at]):
            row = classify(lp, tok, DEFAULT_BAND, DEFAULT_TOP_K)
            assert row["verdict"] in (EXACT, NEAR_TIE), f"request {i} parts at token {at}: {row}"
    return parted


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", [None, 128])
def test_the_prefill_kernel_serves_the_flag_off_tokens(head_dim: int | None, tmp_path: Path) -> None:
    """VT_PREFILL_ATTN on: chunked prefills (extend rows over a cached prefix) beside decode rows, under a small
    token budget and a shared prompt prefix, give the flag-off run's tokens, or part from them only at a near
    tie of the oracle's; VT_SAMPLE_ROWS_KERNEL on top gives exactly the same tokens (its draw is the
    reference's); the counters show each flag's arms ran."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the prefill attention kernel runs only on a GPU")
    from engine import kernels
    from engine.flags import FlagSnapshot
    from lab.data.make_tiny import build

    model = TINY_MODEL
    if head_dim is not None:
        build(head_dim=head_dim).save_pretrained(tmp_path / "model")
        model = tmp_path / "model"
    shared = random_prompts(1, 5, 40, 40)[0]
    prompts = [shared + p for p in random_prompts(6, 12, 1, 60)] + random_prompts(4, 13, 1, 90)
    params = [
        SamplingParams(temperature=0.0 if i % 3 else 0.8, seed=i, max_tokens=16 + i, ignore_eos=True)
        for i in range(len(prompts))
    ]
    runs = {}
    for prefill, draw in ((False, False), (True, False), (True, True)):
        kernels.reset_counts()
        flags = FlagSnapshot.defaults().with_(VT_PREFILL_ATTN=prefill, VT_SAMPLE_ROWS_KERNEL=draw)
        llm = LLM(model, "bfloat16", "cuda", max_num_seqs=8, max_model_len=256, max_num_batched_tokens=48, flags=flags)
        runs[prefill, draw] = [o.token_ids for o in llm.generate(prompts, params)]
        seen = kernels.counts()
        print(kernels.render_counts(seen))
        if prefill:
            assert seen.ran[("extend_attention", "mma")] > 0 and seen.ran[("prefill_attention", "mma")] > 0
            assert ("extend_attention", "reference") not in seen.ran
        else:
            assert kernels.arms_ran("VT_PREFILL_ATTN", seen) == 0
        assert (kernels.arms_ran("VT_SAMPLE_ROWS_KERNEL", seen) > 0) is draw  # the sampled rows' draws
    assert runs[True, True] == runs[True, False]  # the fused draw is the reference's token, bit for bit
    # the prefill kernel is not bitwise (another fp32 summation order): where the runs part, a near tie
    parted = assert_partings_are_near_ties(model, prompts, params, runs[True, False], runs[False, False])
    assert parted <= len(prompts) // 4, f"{parted} of {len(prompts)} requests parted"


def async_flags():  # type: ignore[no-untyped-def]
    from engine.flags import FlagSnapshot

    return FlagSnapshot.from_env().with_(VT_ASYNC_SCHEDULE=True)


@pytest.mark.parametrize(
    "config",
    [
        {"max_num_seqs": 3, "max_model_len": 128, "max_num_batched_tokens": 24},
        {"max_num_seqs": 6, "max_model_len": 64, "num_blocks": 7, "block_size": 8},  # preemption
    ],
)
def test_async_scheduling_gives_the_synchronous_outputs(solo: LLM, config: dict) -> None:
    """VT_ASYNC_SCHEDULE: the next step is scheduled and staged before the step in flight is read back; every
    request's tokens and finish reason are the synchronous run's, stop tokens and EOS included."""
    prompts = random_prompts(10, 14, 1, 30)
    first = solo_tokens(solo, prompts[0], 12)
    stop = next(t for i, t in enumerate(first) if i >= 2 and t not in first[:i])
    params = [
        SamplingParams(temperature=0.0 if i % 2 else 0.8, seed=i, max_tokens=4 + i, ignore_eos=i % 3 == 0)
        for i in range(10)
    ]
    params[0] = SamplingParams(temperature=0, max_tokens=12, stop_token_ids=[stop])
    model = TINY_MODEL
    sync = LLM(model, **config)
    llm = LLM(model, **config, flags=async_flags())
    events: list[str] = []
    for name, obj in (("schedule", llm.scheduler), ("launch", llm.runner), ("read", llm.runner)):
        attr = {"schedule": "schedule", "launch": "launch_decode", "read": "read_tokens"}[name]
        inner = getattr(obj, attr)

        def logged(*a, _inner=inner, _name=name):  # type: ignore[no-untyped-def]
            events.append(_name)
            return _inner(*a)

        setattr(obj, attr, logged)
    want = sync.generate(prompts, params)
    got = llm.generate(prompts, params)
    assert [(o.token_ids, o.finish_reason) for o in got] == [(o.token_ids, o.finish_reason) for o in want]
    assert got[0].finish_reason == "stop" and got[0].token_ids[-1] == stop
    # the overlap ran: a step was read only after the next one was scheduled
    pattern = "".join(e[0] for e in events)
    assert pattern.count("lsr") >= 5, pattern
    if config.get("num_blocks"):
        assert llm.stats["preemptions"] > 0
    llm.scheduler.check_empty()
    assert not llm.has_unfinished_requests() and not llm.in_flight


@pytest.mark.parametrize("fail_at", [0, 2, 5, 9])
def test_async_scheduling_frees_everything_when_a_read_fails(solo: LLM, monkeypatch, fail_at: int) -> None:
    llm = LLM(max_num_seqs=3, max_model_len=64, num_blocks=8, block_size=8, flags=async_flags())
    prompts = random_prompts(5, 9, 5, 20)
    real, calls = llm.runner.read_tokens, []

    def failing(out, n):  # type: ignore[no-untyped-def]
        calls.append(n)
        if len(calls) == fail_at + 1:
            raise RuntimeError("device lost")
        return real(out, n)

    monkeypatch.setattr(llm.runner, "read_tokens", failing)
    with pytest.raises(RuntimeError, match="device lost"):
        llm.generate(prompts, SamplingParams(max_tokens=12, **GREEDY))
    llm.scheduler.check_empty()
    assert not llm.has_unfinished_requests() and not llm.in_flight
    monkeypatch.setattr(llm.runner, "read_tokens", real)
    outs = llm.generate(prompts, SamplingParams(max_tokens=12, **GREEDY))
    assert [o.token_ids for o in outs] == [solo_tokens(solo, p, 12) for p in prompts]
