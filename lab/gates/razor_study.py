"""Measure razor rules offline: collect each seeded run's judged positions once, then score candidate rules on them.

`python -m lab.gates.razor_study collect --razor fp32-probs --seeds 10 --out F.jsonl` runs every bug and twin of
the setting (lab/gates/teeth.py) once per seed and dtype and writes, per run, the positions that were not exact
against the setting's oracle, each with the fp32 twin's verdict on the same ids (lab/gates/harness.py fp32_twin).
`python -m lab.gates.razor_study rules F.jsonl` prints, for every rule in RULES, the bugs caught and the twins'
false alarms over the collected seeds. A rule is a function of one run's rows, so a new rule costs no engine run:
the teeth at 10 seeds take minutes of CPU per seeded change, and a rule search would otherwise repeat them.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from engine import kernels
from engine.model.config import checkpoint_dtype, load_config
from lab.gates import harness, teeth
from lab.gates.neartie import (
    EXACT,
    NEAR_TIE,
    OUT_OF_BAND,
    OUTSIDE_TOP_K,
    classify,
    context_weight,
    near_tie_budget,
    near_tie_gate,
    out_of_band_budget,
)
from lab.gates.oracle import ATTN_IMPLEMENTATIONS
from lab.gates.tokens import RAZOR_NEW_TOKENS, RAZOR_PROMPT_LENS, default_prompts

Run = dict[str, Any]  # one (seeded, seed, dtype) run: "weight", "positions", "rows" (the positions not exact)


def collect_run(
    seeded: teeth.Seeded,
    model_dir: Path,
    seed: int,
    dtype: str,
    oracles: teeth.Oracles,
    razor: kernels.Razor,
    sets: int,
) -> Run:
    """One run's positions that are not exact against the setting's oracle, each with the fp32 twin's verdict."""
    prompts = default_prompts(load_config(model_dir).vocab_size, seed, RAZOR_PROMPT_LENS * sets)
    setup = teeth._setup(model_dir, prompts, RAZOR_NEW_TOKENS, dtype, oracles.device)
    with teeth.BASES[razor.name](), seeded.patch():
        ours, steps = generate_with_logprobs(setup)
    oracle = oracles(model_dir, dtype, razor.oracle_attn)
    logprobs = [oracle.teacher_forced_logprobs(p, t) for p, t in zip(prompts, ours, strict=True)]
    # each position's largest |log-prob difference| over our most probable tokens, ours against the oracle's
    dist = harness.logprob_distance(steps, logprobs)
    result = near_tie_gate(prompts, ours, logprobs, max_near_tie_rate=1.0, max_out_of_band_rate=1.0)
    rows = result.details["not_exact"]
    twin = _twin(oracles, model_dir, dtype)
    late = {r["prompt"] for r in rows}
    twins = {i: twin.teacher_forced_logprobs(prompts[i], ours[i]) for i in sorted(late)}
    for r in rows:
        again = classify(twins[r["prompt"]][r["pos"]], r["ours"], teeth.DEFAULT_BAND, teeth.DEFAULT_TOP_K)
        r["twin_verdict"], r["twin_gap"], r["twin_margin"] = again["verdict"], again["gap"], again["oracle_margin"]
        r["context"] = len(prompts[r["prompt"]]) + r["pos"]
    weight = sum(context_weight(len(p) + i) for p, t in zip(prompts, ours, strict=True) for i in range(len(t)))
    return {
        "seeded": seeded.name,
        "good": seeded.good,
        "seed": seed,
        "dtype": dtype,
        "sets": sets,
        "positions": sum(len(t) for t in ours),
        "weight": weight,
        "rows": rows,
        "logprob_dist": {"mean": dist["mean"], "max": dist["max"]},
    }


TOP_LOGPROBS = harness.TOP_LOGPROBS


def generate_with_logprobs(setup: harness.Setup) -> tuple[list[list[int]], harness.EngineLogprobs]:
    """The engine's greedy ids and its own top log-probs per position (`harness.Setup.ours_with_logprobs`)."""
    return setup.ours_with_logprobs()


# the setting's base engine with nothing changed: what the oracle's own numerics leave out of band by themselves
CONTROL = teeth.Seeded("none", "the base engine, nothing changed", contextlib.nullcontext, good=True)

_TWINS: dict[tuple[Path, str], Any] = {}


def _twin(oracles: teeth.Oracles, model_dir: Path, dtype: str) -> Any:
    key = (model_dir, dtype)
    if key not in _TWINS:
        _TWINS[key] = harness.fp32_twin(model_dir, harness.DTYPES[dtype], oracles.device)
    return _TWINS[key]


# --- rules: one run's rows -> caught (True: the razor fails the run) -----------------------------------------
Rule = Callable[[Run], bool]


def budget_rule(near_tie_rate: float, oob_rate: float, arbiter: bool = False) -> Rule:
    """Today's rule (lab/gates/neartie.py): out of band over its budget, outside top-k, or near-ties over theirs.
    With `arbiter`, an out-of-band position the fp32 twin finds exact or a near-tie counts as a near-tie."""

    def rule(run: Run) -> bool:
        oob = sum(
            r["verdict"] == OUT_OF_BAND and not (arbiter and r["twin_verdict"] in (EXACT, NEAR_TIE))
            for r in run["rows"]
        )
        outside = sum(r["verdict"] == OUTSIDE_TOP_K for r in run["rows"])
        near = len(run["rows"]) - oob - outside
        return bool(
            outside
            or oob > out_of_band_budget(run["weight"], oob_rate)
            or near > near_tie_budget(run["weight"], near_tie_rate)
        )

    return rule


def not_exact_rule(rate: float) -> Rule:
    """Every position that is not exact (near-tie, out of band) in one budget; outside top-k always fails."""

    def rule(run: Run) -> bool:
        outside = any(r["verdict"] == OUTSIDE_TOP_K for r in run["rows"])
        return outside or len(run["rows"]) > max(1, int(run["weight"] * rate))

    return rule


def gap_sum_rule(nats_per_position: float) -> Rule:
    """The summed log-prob gap of the positions not exact, per judged position, over a threshold."""

    def rule(run: Run) -> bool:
        outside = any(r["verdict"] == OUTSIDE_TOP_K for r in run["rows"])
        return outside or sum(r["gap"] for r in run["rows"]) > nats_per_position * run["weight"]

    return rule


def twin_rule(rate: float) -> Rule:
    """The positions where the fp32 twin does not pick our token either (not exact against both), in one budget."""

    def rule(run: Run) -> bool:
        outside = any(r["verdict"] == OUTSIDE_TOP_K for r in run["rows"])
        both = sum(r["twin_verdict"] != EXACT for r in run["rows"])
        return outside or both > max(1, int(run["weight"] * rate))

    return rule


def logprob_rule(fp32: float, bf16: float) -> Rule:
    """The mean over positions of the largest |log-prob difference| (ours against the oracle's, same ids) over a
    threshold per dtype: in fp32 a correct reordering sits at fp32 noise and a changed function above it; in
    bf16 a moved rounding point adds more than a reordering of fp32 sums does."""

    def rule(run: Run) -> bool:
        limit = fp32 if run["dtype"] == "float32" else bf16
        return bool(run["logprob_dist"]["mean"] > limit)

    return rule


RULES: dict[str, Rule] = {
    "budget nt0.02 oob0.0015 (today)": budget_rule(0.02, 0.0015),
    "budget nt0.02 oob0.0015 +arbiter": budget_rule(0.02, 0.0015, arbiter=True),
    **{f"not-exact rate {r}": not_exact_rule(r) for r in (0.005, 0.0075, 0.01, 0.0125, 0.015, 0.02)},
    **{f"gap-sum {g} nats/pos": gap_sum_rule(g) for g in (0.001, 0.0015, 0.002, 0.003, 0.004)},
    **{f"twin-not-exact rate {r}": twin_rule(r) for r in (0.003, 0.005, 0.0075, 0.01)},
}
LOGPROB_RULES: dict[str, Rule] = {
    f"logprob-dist fp32 {a:g} bf16 {b:g}": logprob_rule(a, b)
    # the first five were tried on the full-vocabulary distance, the rest on TOP_LOGPROBS tokens (a smaller scale)
    for a, b in ((1.5e-4, 0.9), (2.5e-4, 0.95), (2.5e-4, 1.0), (4e-4, 1.0), (2.5e-4, 1.05), (2.5e-4, 0.65))
    + ((2.5e-4, 0.7), (2.5e-4, 0.75), (1.5e-4, 0.7))
}


def score(runs: list[Run], rule: Rule) -> dict[str, tuple[int, int]]:
    """Per seeded change: (seeds caught, seeds run); a seed is caught when any of its dtypes' runs is."""
    by: dict[str, dict[int, bool]] = {}
    for run in runs:
        seeds = by.setdefault(run["seeded"], {})
        seeds[run["seed"]] = seeds.get(run["seed"], False) or rule(run)
    return {name: (sum(s.values()), len(s)) for name, s in by.items()}


def rules_table(runs: list[Run], rules: dict[str, Rule] = RULES) -> tuple[list[str], list[tuple[str, bool, list[str]]]]:
    """(seeded names, rows): each rule's caught/seeds per seeded change and whether it meets the teeth's target
    (>= 9/10 of each bug, <= 1/10 of each twin)."""
    names = list(dict.fromkeys(r["seeded"] for r in runs))
    good = {r["seeded"]: r["good"] for r in runs}
    out = []
    for label, rule in rules.items():
        s = score(runs, rule)
        ok = all(c <= 0.1 * n if good[k] else c >= 0.9 * n for k, (c, n) in s.items())
        out.append((label, ok, [f"{s[k][0]}/{s[k][1]}" for k in names]))
    return names, out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.gates.razor_study", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="run the bugs and twins once per seed and dtype; write their rows")
    c.add_argument("--razor", choices=list(kernels.RAZORS), default="fp32-probs")
    c.add_argument("--seeds", type=int, default=10)
    c.add_argument(
        "--oracle-attn", choices=ATTN_IMPLEMENTATIONS, help="the oracle's attention (default: the setting's)"
    )
    c.add_argument("--first-seed", type=int, default=0)
    c.add_argument("--bugs", nargs="+", metavar="NAME")
    c.add_argument("--prompt-sets", type=int, default=1)
    c.add_argument("--models-dir", type=Path, default=Path("/tmp/rowgate-gate-models"))
    c.add_argument("--out", type=Path, required=True, help="JSON lines, appended: one run a line")
    r = sub.add_parser("rules", help="score RULES on collected runs")
    r.add_argument("files", nargs="+", type=Path)
    args = p.parse_args(argv)
    if args.cmd == "rules":
        runs = [json.loads(line) for f in args.files for line in f.read_text().splitlines() if line.strip()]
        if not runs:
            print("error: no runs in the files: nothing was scored")
            return 2
        rules = RULES | (LOGPROB_RULES if all("logprob_dist" in r for r in runs) else {})
        names, rows = rules_table(runs, rules)
        print(f"{len(runs)} runs; columns: {', '.join(names)}")
        for label, ok, cells in rows:
            print(f"{label:40s} {'MEETS' if ok else 'misses':6s} " + " ".join(f"{x:>5s}" for x in cells))
        return 0
    razor = kernels.RAZORS[args.razor]
    if args.oracle_attn:
        razor = dataclasses.replace(razor, oracle_attn=args.oracle_attn)
    known = {s.name: s for s in (*teeth.seeded_for(razor.name), CONTROL)}
    names = args.bugs or list(known)
    torch.set_num_threads(1)
    oracles = teeth.Oracles("cpu")
    window = teeth.window_model_dir(args.models_dir) if any(known[n].window for n in names) else None
    with args.out.open("a") as out:
        for name in names:
            s = known[name]
            model = teeth.model_for(s, window)
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                for dtype in dict.fromkeys([checkpoint_dtype(load_config(model)), "bfloat16"]):
                    run = collect_run(s, model, seed, dtype, oracles, razor, args.prompt_sets)
                    out.write(json.dumps(run) + "\n")
                    out.flush()
                    counts = {v: sum(x["verdict"] == v for x in run["rows"]) for v in (NEAR_TIE, OUT_OF_BAND)}
                    print(f"{name} seed {seed} {dtype}: {counts}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
