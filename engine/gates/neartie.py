"""Near-tie razor: teacher-force the oracle on our ids and judge every position by its log-prob gap."""

from __future__ import annotations

from typing import Any

import torch

from engine.gates.result import FAIL, PASS, GateResult

DEFAULT_BAND = 0.5  # nats
DEFAULT_TOP_K = 5

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
    elif oracle_margin <= band and gap <= band:
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
) -> GateResult:
    table: list[dict[str, Any]] = []
    for i, (toks, lp) in enumerate(zip(ours, logprobs, strict=True)):
        for pos, tok in enumerate(toks):
            table.append({"prompt": i, "pos": pos, **classify(lp[pos], tok, band, top_k)})
    if not table:
        return GateResult("neartie", FAIL, "no positions: nothing was judged")
    counts = {v: sum(r["verdict"] == v for r in table) for v in (EXACT, NEAR_TIE, OUT_OF_BAND, OUTSIDE_TOP_K)}
    bad = counts[OUT_OF_BAND] + counts[OUTSIDE_TOP_K]
    summary = (
        f"{len(table)} positions over {len(prompts)} prompts: {counts[EXACT]} exact, {counts[NEAR_TIE]} "
        f"near-tie, {counts[OUT_OF_BAND]} out of band, {counts[OUTSIDE_TOP_K]} outside top-{top_k} "
        f"(band {band} nats)"
    )
    details = {"band": band, "top_k": top_k, "counts": counts, "max_gap": max(r["gap"] for r in table)}
    return GateResult("neartie", FAIL if bad else PASS, summary, table, details)
