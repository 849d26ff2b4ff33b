"""The gates' verdict logic on synthetic inputs: token-exact, near-tie rows, distributional refusal."""

from __future__ import annotations

import math

import pytest
import torch

from lab.gates.distributional import distributional_gate
from lab.gates.neartie import EXACT, NEAR_TIE, OUT_OF_BAND, OUTSIDE_TOP_K, classify, near_tie_gate
from lab.gates.result import FAIL, PASS, REFUSED
from lab.gates.tokens import ids_digest, token_gate


def logprobs(values: dict[int, float], vocab: int = 13) -> torch.Tensor:
    """Log-softmax of logits that are -10 except at the given ids."""
    logits = torch.full((vocab,), -10.0)
    for i, v in values.items():
        logits[i] = v
    return torch.log_softmax(logits, dim=-1)


def test_token_gate_reports_the_first_divergence() -> None:
    prompts = [[1], [2, 3]]
    ok = token_gate(prompts, [[5, 6, 7], [8, 9]], [[5, 6, 7], [8, 9]])
    assert ok.verdict == PASS and ok.summary == "5 tokens over 2 prompts equal the oracle's"
    bad = token_gate(prompts, [[5, 6, 7], [8, 9]], [[5, 6, 4], [8, 9]])
    assert bad.verdict == FAIL
    assert bad.summary == "1 of 2 prompts diverge from the oracle (first at prompt 0, token 2)"
    assert bad.table[0] == {
        "prompt": 0,
        "prompt_len": 1,
        "new_tokens": 3,
        "first_divergence": 2,
        "ours": [7],
        "oracle": [4],
        "ours_digest": ids_digest([5, 6, 7]),
    }
    assert ids_digest([5, 6, 7]) == bad.table[0]["ours_digest"] != ids_digest([5, 6, 4]) != ids_digest([5, 64])
    short = token_gate(prompts, [[5, 6], [8, 9]], [[5, 6, 7], [8, 9]])
    assert short.verdict == FAIL and short.table[0]["first_divergence"] == 2
    assert token_gate([], [], []).verdict == FAIL  # nothing compared is not a pass


@pytest.mark.parametrize(
    "values, token, verdict",
    [
        ({3: 2.0, 4: 1.0}, 3, EXACT),
        ({3: 2.0, 4: 1.8}, 4, NEAR_TIE),  # oracle's top two 0.2 nats apart, ours second
        ({3: 2.0, 4: 1.0}, 4, OUT_OF_BAND),  # a clear oracle winner: any gap fails
        ({3: 2.0, 4: 1.9, 5: 1.3}, 5, OUT_OF_BAND),  # oracle tied at the top, but ours 0.7 nats down
        ({3: 2.0, 4: 1.9, 5: 1.8, 6: 1.7}, 6, OUTSIDE_TOP_K),  # within the band, but not in the top 3
    ],
)
def test_classify(values: dict[int, float], token: int, verdict: str) -> None:
    row = classify(logprobs(values), token, band=0.5, top_k=3)
    assert row["verdict"] == verdict
    assert row["oracle_top1"] == 3
    assert math.isclose(row["gap"], values[3] - values[token], abs_tol=1e-5)


def test_exact_tie_counts_as_exact() -> None:
    row = classify(logprobs({2: 1.0, 7: 1.0}), 7, band=0.0, top_k=2)
    assert row["verdict"] == EXACT and row["gap"] == 0.0


def test_near_tie_gate_passes_in_band_and_fails_outside() -> None:
    lp = torch.stack([logprobs({3: 2.0, 4: 1.8}), logprobs({1: 3.0})])
    ok = near_tie_gate([[0]], [[4, 1]], [lp], band=0.5, top_k=5)
    assert ok.verdict == PASS and ok.details["counts"] == {EXACT: 1, NEAR_TIE: 1, OUT_OF_BAND: 0, OUTSIDE_TOP_K: 0}
    strict = near_tie_gate([[0]], [[4, 1]], [lp], band=0.1, top_k=5)
    assert strict.verdict == FAIL and strict.table[0]["verdict"] == OUT_OF_BAND
    assert near_tie_gate([], [], []).verdict == FAIL


def test_distributional_refuses_where_the_oracle_is_deterministic() -> None:
    result = distributional_gate([[1], [2]], [[5, 6], [7, 8]], [[[5, 6]] * 3, [[7, 8]] * 3])
    assert result.verdict == REFUSED
    assert "deterministic on all 2 prompts over 3 runs" in result.summary


def test_distributional_relaxes_only_non_deterministic_prompts() -> None:
    runs = [[[5, 6], [5, 9], [5, 6]], [[7, 8]] * 3]
    assert distributional_gate([[1], [2]], [[5, 9], [7, 8]], runs).verdict == PASS
    # ours follows no oracle run on the varying prompt
    assert distributional_gate([[1], [2]], [[5, 4], [7, 8]], runs).verdict == FAIL
    # the deterministic prompt stays exact even though another prompt relaxes
    assert distributional_gate([[1], [2]], [[5, 9], [7, 3]], runs).verdict == FAIL
    with pytest.raises(ValueError, match="determinism needs at least 2"):
        distributional_gate([[1]], [[5]], [[[5]]])


def test_a_gap_of_exactly_the_band_in_fp32_noise_is_a_near_tie() -> None:
    # two logits 0.5 apart read 0.5 plus a few fp32 ulps as log-prob differences
    row = classify(logprobs({3: 40.0, 4: 40.0 - 0.5 - 4e-6}), 4, band=0.5, top_k=5)
    assert row["verdict"] == NEAR_TIE and row["gap"] > 0.5
    assert classify(logprobs({3: 40.0, 4: 39.49}), 4, band=0.5, top_k=5)["verdict"] == OUT_OF_BAND


def test_near_tie_budget_is_one_percent_and_grows_with_the_context() -> None:
    from lab.gates.neartie import context_weight, near_tie_budget

    assert near_tie_budget(1024) == 10 and near_tie_budget(2) == 1 and near_tie_budget(0) == 1
    assert context_weight(1) == context_weight(128) == 1.0 and context_weight(512) == 2.0
    lp = torch.stack([logprobs({3: 2.0, 4: 1.8})] * 2)
    short = near_tie_gate([[0] * 10], [[4, 4]], [lp])  # 2 positions, 2 near-ties, budget 1
    assert short.verdict == FAIL and short.details["near_tie_budget"] == 1
    long = near_tie_gate([[0] * 12800], [[4, 4]], [lp], max_near_tie_rate=0.1)  # weight 10 each: budget 2
    assert long.verdict == PASS and long.details["near_tie_budget"] == 2


def test_the_fp32_twin_absolves_only_an_out_of_band_position_it_finds_in_band() -> None:
    """A position out of band against the oracle counts as a near-tie (in the budget) only where the fp32 twin
    finds our token exact or a near-tie; one the twin puts out of band, or one outside the oracle's top-k, stays."""
    oracle = torch.stack([logprobs({3: 2.0, 4: 1.25}), logprobs({3: 2.0, 4: 1.25}), logprobs({1: 3.0})])
    twin = torch.stack([logprobs({3: 1.9, 4: 2.0}), logprobs({3: 2.0, 4: 1.0}), logprobs({1: 3.0})])
    alone = near_tie_gate([[0]], [[4, 4, 1]], [oracle])
    assert alone.verdict == FAIL and alone.details["counts"][OUT_OF_BAND] == 2
    judged = near_tie_gate([[0]], [[4, 4, 1]], [oracle], arbiter=[twin])
    assert [r["verdict"] for r in judged.table] == [NEAR_TIE, OUT_OF_BAND, EXACT]
    assert [r.get("arbiter_verdict") for r in judged.table] == [EXACT, OUT_OF_BAND, None]
    assert judged.verdict == FAIL and judged.details["absolved_by_arbiter"] == 1
    assert "1 out of band against the oracle, a near-tie or exact against its fp32 twin" in judged.summary
    one = near_tie_gate([[0]], [[4, 1]], [oracle[[0, 2]]], arbiter=[twin[[0, 2]]])
    assert one.verdict == PASS and one.details["counts"][NEAR_TIE] == 1  # absolved, and counted in the budget
    wide = logprobs({i: 2.0 - 0.01 * i for i in range(8)} | {9: 1.0})  # our token 9: outside the oracle's top-5
    far = near_tie_gate([[0]], [[9]], [wide[None]], arbiter=[logprobs({9: 5.0})[None]])
    assert far.table[0]["verdict"] == OUTSIDE_TOP_K and far.verdict == FAIL
    assert near_tie_gate([[0]], [[4]], [oracle[:1]], arbiter=[None]).table[0]["verdict"] == OUT_OF_BAND


def test_an_out_of_band_allowance_admits_only_that_many_and_never_outside_the_top_k() -> None:
    """`max_out_of_band_rate` (the calibrated setting for fp32-probability arms against the SDPA oracle): 1 in
    1000 positions out of band passes, 2 fail; the default allows none; outside the top-k fails whatever it is."""
    from lab.gates.neartie import out_of_band_budget

    assert (
        out_of_band_budget(1024) == 0 and out_of_band_budget(1024, 0.001) == 1 and out_of_band_budget(999, 0.001) == 0
    )
    exact, off = logprobs({3: 2.0}), logprobs({3: 2.0, 4: 1.0})  # our token 4 is 1 nat behind, past the band
    rows = [exact] * 1024
    one = torch.stack(rows[:-1] + [off])
    ids = [[3] * 1023 + [4]]
    assert near_tie_gate([[0]], ids, [one]).verdict == FAIL  # the default: none out of band
    allowed = near_tie_gate([[0]], ids, [one], max_out_of_band_rate=0.001)
    assert allowed.verdict == PASS and allowed.details["out_of_band_budget"] == 1
    assert "1 out of band (at most 1)" in allowed.summary
    two = torch.stack(rows[:-2] + [off, off])
    assert near_tie_gate([[0]], [[3] * 1022 + [4, 4]], [two], max_out_of_band_rate=0.001).verdict == FAIL
    wide = logprobs({i: 2.0 - 0.01 * i for i in range(8)} | {9: 1.0})  # token 9: outside the top-5
    far = torch.stack(rows[:-1] + [wide])
    assert near_tie_gate([[0]], [[3] * 1023 + [9]], [far], max_out_of_band_rate=0.5).verdict == FAIL
    with pytest.raises(ValueError, match="max_out_of_band_rate"):
        out_of_band_budget(10, 1.5)


def test_the_out_of_band_allowance_grows_with_context_as_the_near_tie_budget_does() -> None:
    """Four positions out of band in 1024 pass at rate 0.001 after a 1536-token prompt (each position weighs
    sqrt(context / 128), about 3.9 on average) and fail after a 1-token prompt, where the budget is 1."""
    from lab.gates.neartie import context_weight

    exact, off = logprobs({3: 2.0}), logprobs({3: 2.0, 4: 1.0})
    lps = torch.stack([exact] * 1020 + [off] * 4)
    ids = [[3] * 1020 + [4] * 4]
    long = near_tie_gate([[0] * 1536], ids, [lps], max_out_of_band_rate=0.001)
    weight = sum(context_weight(1536 + pos) for pos in range(1024))
    assert long.details["out_of_band_budget"] == int(weight * 0.001) == 4 and long.verdict == PASS
    short = near_tie_gate([[0]], ids, [lps], max_out_of_band_rate=0.001)
    assert short.details["out_of_band_budget"] == 1 and short.verdict == FAIL
