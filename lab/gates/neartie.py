"""Near-tie razor: teacher-force the oracle on our ids and judge every position by its log-prob gap.

A position passes when our token is the oracle's best (gap 0), or, only where the oracle's own top two are
within the band, a near-tie within it. Near-ties are also budgeted: a correct kernel that is not byte-exact
makes a near-tie choice rarely (3 to 4 in 1200 positions on the H200), a moved rounding point makes 15 to 57
in 1024 (the seeded-bug suite, lab/gates/teeth.py), each within the band. So the gate fails when
near-ties exceed `max_near_tie_rate` of the positions (at least one is always allowed). A position whose
context is longer than REF_CONTEXT counts sqrt(context / REF_CONTEXT) positions in that budget: an fp32 sum
over n keys in another order moves its result by about sqrt(n) ulps, so a correct attention kernel flips
more bf16 roundings at long contexts (on the H200, every decode arm, the generic one included, makes 12 to
23 near-ties in 1024 positions at 1600-token contexts and 2 to 3 at 100).

Out of band is a failure by default. `max_out_of_band_rate` allows that fraction of the positions out of band
(weighted by context as the near-tie budget is, rounded down; none at 0): the setting for an arm that keeps fp32
probabilities, judged against an oracle with fp32 attention, where production kernels are out of band too: SDPA
cuDNN and FlashInfer 0-1 in 1024 positions at contexts under 128 tokens, cuDNN 0-4 at 1600 tokens (the
ENGINE-PERF spec's calibration). Outside the top-k always fails.

Gaps are differences of fp32 log-softmax values: two bf16 logits exactly `band` apart can read a few fp32
ulps more, so the band is compared with BAND_SLACK added.
"""

from __future__ import annotations

from typing import Any

import torch

from lab.gates.result import FAIL, PASS, GateResult

DEFAULT_BAND = 0.5  # nats
DEFAULT_TOP_K = 5
DEFAULT_MAX_NEAR_TIE_RATE = 0.01  # near-ties allowed per judged position (at least one in any run)
DEFAULT_MAX_OUT_OF_BAND_RATE = 0.0  # positions out of band allowed per judged position: none
REF_CONTEXT = 128  # tokens: positions with a longer context weigh sqrt(context / REF_CONTEXT) in the budgets
BAND_SLACK = 1e-4  # nats: the fp32 noise of a log-prob difference, well below a bf16 logit ulp (>= 2^-8)

EXACT, NEAR_TIE, OUT_OF_BAND, OUTSIDE_TOP_K = "exact", "near-tie", "out-of-band", "outside-top-k"


def classify(
    logprobs: torch.Tensor,  # [vocab] fp32, the oracle's log-probs at one position
    token: int,
    band: float,
    top_k: int,
) -> dict[str, object]:
    """One position's row: gap = oracle best log-prob minus our token's, and its verdict.

    gap 0: exact. gap > 0 is tolerated only when the oracle's own top two are within
    `band` (it cannot separate the candidates), our token is in its top-k, and the gap
    is within `band`; outside the top-k is a divergence whatever the band.
    """
    top = torch.topk(logprobs, min(top_k, logprobs.numel()))
    best = top.values[0].item()
    gap = best - logprobs[token].item()
    oracle_margin = (top.values[0] - top.values[1]).item() if top.values.numel() > 1 else float("inf")
    in_top_k = token in top.indices.tolist()
    if gap == 0.0:
        verdict = EXACT
    elif not in_top_k:
        verdict = OUTSIDE_TOP_K
    elif oracle_margin <= band + BAND_SLACK and gap <= band + BAND_SLACK:
        verdict = NEAR_TIE
    else:
        verdict = OUT_OF_BAND
    return {
        "ours": token,
        "oracle_top1": int(top.indices[0]),
        "gap": gap,
        "oracle_margin": oracle_margin,
        "verdict": verdict,
    }


def near_tie_gate(
    prompts: list[list[int]],
    ours: list[list[int]],
    logprobs: list[torch.Tensor],  # per prompt: [len(ours[i]), vocab], teacher-forced on ours[i]
    band: float = DEFAULT_BAND,
    top_k: int = DEFAULT_TOP_K,
    max_near_tie_rate: float = DEFAULT_MAX_NEAR_TIE_RATE,
    arbiter: list[torch.Tensor | None] | None = None,  # per prompt: the fp32 twin's log-probs on the same ids
    max_out_of_band_rate: float = DEFAULT_MAX_OUT_OF_BAND_RATE,
) -> GateResult:
    """The razor. With `arbiter`, a position out of band against the oracle is judged again against the fp32
    twin (the same weights in fp32 arithmetic, lab/gates/harness.py fp32_twin): where the twin finds our token
    exact or a near-tie, the oracle's margin was its own rounding and the position counts as a near-tie (in the
    budget, with `arbiter_verdict`); outside the oracle's top-k stays a divergence."""
    table: list[dict[str, Any]] = []
    for i, (toks, lp) in enumerate(zip(ours, logprobs, strict=True)):
        for pos, tok in enumerate(toks):
            row = {"prompt": i, "pos": pos, **classify(lp[pos], tok, band, top_k)}
            twin = arbiter[i] if arbiter is not None else None
            if row["verdict"] == OUT_OF_BAND and twin is not None:
                again = classify(twin[pos], tok, band, top_k)
                row["arbiter_verdict"] = again["verdict"]
                if again["verdict"] in (EXACT, NEAR_TIE):
                    row["verdict"] = NEAR_TIE
            table.append(row)
    if not table:
        return GateResult("neartie", FAIL, "no positions: nothing was judged")
    counts = {v: sum(r["verdict"] == v for r in table) for v in (EXACT, NEAR_TIE, OUT_OF_BAND, OUTSIDE_TOP_K)}
    weight = sum(context_weight(len(prompts[r["prompt"]]) + r["pos"]) for r in table)
    oob_allowed = out_of_band_budget(weight, max_out_of_band_rate)
    bad = max(0, counts[OUT_OF_BAND] - oob_allowed) + counts[OUTSIDE_TOP_K]
    allowed = near_tie_budget(weight, max_near_tie_rate)
    oob_note = f" (at most {oob_allowed})" if max_out_of_band_rate > 0 else ""
    summary = (
        f"{len(table)} positions over {len(prompts)} prompts: {counts[EXACT]} exact, {counts[NEAR_TIE]} "
        f"near-tie (at most {allowed}), {counts[OUT_OF_BAND]} out of band{oob_note}, {counts[OUTSIDE_TOP_K]} outside "
        f"top-{top_k} (band {band} nats)"
    )
    absolved = sum(r.get("arbiter_verdict") in (EXACT, NEAR_TIE) for r in table)
    if arbiter is not None:
        summary += f"; {absolved} out of band against the oracle, a near-tie or exact against its fp32 twin"
    details = {
        "band": band,
        "top_k": top_k,
        "counts": counts,
        "near_tie_budget": allowed,
        "out_of_band_budget": oob_allowed,
        "max_gap": max(r["gap"] for r in table),
        "not_exact": [r for r in table if r["verdict"] != EXACT],
        "absolved_by_arbiter": absolved,
    }
    return GateResult("neartie", FAIL if bad or counts[NEAR_TIE] > allowed else PASS, summary, table, details)


def near_tie_budget(positions: float, rate: float = DEFAULT_MAX_NEAR_TIE_RATE) -> int:
    """Near-ties a run of `positions` (weighted: `context_weight`) may make: `rate` of them, rounded down, at least one."""
    if not 0 <= rate <= 1:
        raise ValueError(f"max_near_tie_rate: expected a fraction in [0, 1], got {rate}")
    return max(1, int(positions * rate))


def out_of_band_budget(positions: float, rate: float = DEFAULT_MAX_OUT_OF_BAND_RATE) -> int:
    """Positions out of band a run of `positions` (weighted: `context_weight`) may have: `rate` of them, rounded
    down (none at rate 0)."""
    if not 0 <= rate <= 1:
        raise ValueError(f"max_out_of_band_rate: expected a fraction in [0, 1], got {rate}")
    return int(positions * rate)


def context_weight(context: int) -> float:
    """What one position with `context` tokens before it counts in the near-tie and out-of-band budgets: 1 up
    to REF_CONTEXT."""
    return max(1.0, context / REF_CONTEXT) ** 0.5


def razor_selftest(logprobs: list[torch.Tensor], band: float, top_k: int) -> dict[str, int]:
    """The razor's comparison shown able to fail in the same run: per prompt, the oracle's least likely token at
    the last position (its context unchanged) must be judged out of band or outside the top-k."""
    seeded = caught = 0
    for lp in logprobs:
        if lp.shape[0] == 0:
            continue
        seeded += 1
        worst = int(torch.argmin(lp[-1]).item())
        caught += classify(lp[-1], worst, band, top_k)["verdict"] in (OUT_OF_BAND, OUTSIDE_TOP_K)
    return {"seeded": seeded, "caught": caught}
