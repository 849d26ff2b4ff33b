"""The fp32-probs razor setting's log-prob rule, live in the near-tie harness: the engine's own top log-probs
(through `LLM.generate`) against the setting's oracle, the run's mean distance over a per-dtype limit fails it."""

from __future__ import annotations

import pytest
import torch

from engine import kernels
from engine.model.config import load_config
from lab.gates import harness, teeth
from lab.gates.result import FAIL, PASS
from lab.gates.tokens import default_prompts

LIMIT = kernels.FP32_PROBS_RAZOR.logprob_limit("float32")


def test_the_fp32_probs_setting_carries_its_measured_limits() -> None:
    razor = kernels.FP32_PROBS_RAZOR
    assert razor.oracle_attn == "online"  # the oracle the limits were measured against
    assert (razor.logprob_limit("float32"), razor.logprob_limit("bfloat16")) == (2.5e-4, 0.7)
    assert razor.logprob_limit("float16") is None and kernels.EAGER_RAZOR.logprob_limit("float32") is None


def test_logprob_distance_is_the_mean_of_each_positions_largest_gap() -> None:
    oracle = [torch.log_softmax(torch.tensor([[0.0, 1.0, 2.0], [2.0, 0.0, 0.0]]), dim=-1)]
    exact = [[{t: oracle[0][i, t].item() for t in range(3)} for i in range(2)]]
    assert harness.logprob_distance(exact, oracle) == {"mean": 0.0, "max": 0.0, "positions": 2}
    exact[0][0][1] += 0.3  # one token at the first position off by 0.3, one at the second by 0.1 and 0.05
    exact[0][1][0] -= 0.1
    exact[0][1][2] += 0.05
    got = harness.logprob_distance(exact, oracle)
    assert got["mean"] == pytest.approx(0.2) and got["max"] == pytest.approx(0.3) and got["positions"] == 2
    with pytest.raises(ValueError, match="nothing was compared"):
        harness.logprob_distance([[]], [torch.zeros(0, 3)])


@pytest.fixture(scope="module")
def run() -> tuple[harness.Setup, list[list[int]], harness.EngineLogprobs, teeth.Oracles]:
    """The fp32-probs setting's engine (an online softmax) on 4 prompts x 12 tokens in float32, with its log-probs."""
    model = harness.TINY_MODEL
    setup = harness.Setup(model, default_prompts(load_config(model).vocab_size, 3, (1, 6, 13, 31)), 12)
    with teeth.BASES["fp32-probs"]():
        ours, tops = setup.ours_with_logprobs()
    return setup, ours, tops, teeth.Oracles()


def _judge(run, tops: harness.EngineLogprobs, ours: list[list[int]] | None = None):  # type: ignore[no-untyped-def]
    setup, base_ours, _, oracles = run
    oracle = oracles(setup.model_dir, "float32", kernels.FP32_PROBS_RAZOR.oracle_attn)
    return harness.neartie(
        setup,
        ours=ours or base_ours,
        oracle=oracle,
        max_near_tie_rate=kernels.FP32_PROBS_RAZOR.max_near_tie_rate,
        max_out_of_band_rate=kernels.FP32_PROBS_RAZOR.max_out_of_band_rate,
        engine_logprobs=tops,
        max_logprob_dist=LIMIT,
    )


def _shifted(tops: harness.EngineLogprobs, by: float) -> harness.EngineLogprobs:
    return [[{t: v + by for t, v in pos.items()} for pos in prompt] for prompt in tops]


def test_an_unchanged_engine_passes_and_a_shifted_logprob_fails(run) -> None:  # type: ignore[no-untyped-def]
    _, ours, tops, _ = run
    assert all(len(pos) >= harness.TOP_LOGPROBS for prompt in tops for pos in prompt)  # the engine's top 20 came back
    passed = _judge(run, tops)
    dist = passed.details["logprob_dist"]
    assert passed.verdict == PASS, passed.summary
    assert dist["positions"] == 48 and 0 < dist["mean"] < LIMIT and dist["passed"]  # judged, at fp32 noise
    assert f"within the limit {LIMIT:g}" in passed.summary
    # every engine log-prob seeded 1.5 limits off the oracle's: the tokens are unchanged, the rule alone fails it
    failed = _judge(run, _shifted(tops, 1.5 * LIMIT))
    assert failed.verdict == FAIL and failed.details["counts"] == passed.details["counts"]
    assert failed.summary.startswith("log-prob distance 0.000")
    assert f"exceeds the limit {LIMIT:g}" in failed.summary and "48 positions" in failed.summary
    assert failed.details["logprob_dist"]["mean"] > LIMIT
    # half a limit stays within it: the rule is a threshold on the measured distance, not any difference
    assert _judge(run, _shifted(tops, 0.5 * LIMIT)).verdict == PASS


def test_a_changed_function_fails_on_the_rule(run) -> None:  # type: ignore[no-untyped-def]
    """RMSNorm's eps x10 (teeth's seeded bug) through the live path: its tokens may all agree, its log-probs do not."""
    setup = run[0]
    with teeth.BASES["fp32-probs"](), teeth.SEEDED["eps-x10"].patch():
        ours, tops = setup.ours_with_logprobs()
    result = _judge(run, tops, ours)
    assert result.verdict == FAIL and result.details["logprob_dist"]["mean"] > LIMIT, result.summary


def test_the_rule_needs_the_engines_logprobs(run) -> None:  # type: ignore[no-untyped-def]
    setup, ours, _, _ = run
    with pytest.raises(ValueError, match="needs the engine's log-probs"):
        harness.neartie(setup, ours=ours, max_logprob_dist=LIMIT)
