"""Distributional gate: a relaxed comparison, allowed only where the oracle's own greedy decoding varies."""

from __future__ import annotations

from typing import Any

from lab.gates.result import FAIL, PASS, REFUSED, GateResult

DEFAULT_RUNS = 4


def distributional_gate(
    prompts: list[list[int]],
    ours: list[list[int]],
    oracle_runs: list[list[list[int]]],  # per prompt: K greedy runs of the oracle
) -> GateResult:
    """Where the oracle is deterministic over its K runs, our ids must equal them (no relaxation);
    where its runs differ, ours must follow one of them. With no non-deterministic prompt the
    relaxed gate refuses: the token-exact gate is the one that applies.
    """
    table: list[dict[str, Any]] = []
    for i, (toks, runs) in enumerate(zip(ours, oracle_runs, strict=True)):
        if len(runs) < 2:
            raise ValueError(f"prompt {i}: {len(runs)} oracle runs; determinism needs at least 2")
        distinct = {tuple(r) for r in runs}
        deterministic = len(distinct) == 1
        ok = tuple(toks) in distinct
        table.append(
            {
                "prompt": i,
                "runs": len(runs),
                "distinct_oracle_outputs": len(distinct),
                "deterministic": deterministic,
                "ours_matches_a_run": ok,
            }
        )
    relaxed = [r for r in table if not r["deterministic"]]
    num_runs = table[0]["runs"] if table else 0
    if not relaxed:
        return GateResult(
            "distributional",
            REFUSED,
            f"the oracle's greedy decoding is deterministic on all {len(table)} prompts over "
            f"{num_runs} runs each: the relaxed gate is not allowed here; use the token-exact gate",
            table,
        )
    bad = [r for r in table if not r["ours_matches_a_run"]]
    if bad:
        return GateResult(
            "distributional",
            FAIL,
            f"{len(bad)} of {len(table)} prompts follow none of the "
            f"oracle's runs (relaxed on {len(relaxed)} non-deterministic prompts)",
            table,
        )
    return GateResult(
        "distributional",
        PASS,
        f"relaxed on {len(relaxed)} non-deterministic prompts, exact on "
        f"{len(table) - len(relaxed)}; every prompt follows an oracle run",
        table,
    )
