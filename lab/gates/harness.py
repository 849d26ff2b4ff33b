"""Run the engine and the oracle on the same prompts and apply a gate; what the CLI and tests call."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from engine.flags import FlagSnapshot
from engine.llm import LLM
from engine.llm import TINY_MODEL as EMBEDDED_MODEL
from engine.runner import DTYPES
from engine.sampling_params import SamplingParams
from lab.drive import greedy, greedy_llm
from lab.gates import goldens as gold
from lab.gates.distributional import distributional_gate
from lab.gates.ledger import repo_root, write_record
from lab.gates.neartie import (
    DEFAULT_BAND,
    DEFAULT_MAX_NEAR_TIE_RATE,
    DEFAULT_MAX_OUT_OF_BAND_RATE,
    DEFAULT_TOP_K,
    OUT_OF_BAND,
    near_tie_gate,
    razor_selftest,
)
from lab.gates.oracle import Oracle
from lab.gates.result import FAIL, PASS, GateResult
from lab.gates.tokens import token_gate, token_selftest

TINY_MODEL = EMBEDDED_MODEL  # the engine's own tiny model, the gates' default
TOP_LOGPROBS = 20  # the engine's most probable tokens per position the log-prob distance compares (its maximum)
# per prompt and position: the engine's own log-probs of its TOP_LOGPROBS most probable tokens, by token id
EngineLogprobs = list[list[dict[int, float]]]


@dataclass
class Setup:
    """What both sides run: one model directory, dtype and device, a batch of prompts and a token budget."""

    model_dir: Path
    prompts: list[list[int]]
    max_new_tokens: int
    dtype: str = "float32"
    device: str = "cpu"
    oracle_dir: Path | None = None  # what transformers loads, if not model_dir (a quantized model's twin)
    flags: FlagSnapshot | None = None  # the engine's flags (default: the environment, read once by the Runner)
    oracle_attn: str = "eager"  # transformers' attention: eager rounds as the engine's reference; sdpa as production

    def llm(self) -> LLM:
        return greedy_llm(self.model_dir, self.dtype, self.device, self.prompts, self.max_new_tokens, self.flags)

    def oracle(self) -> Oracle:
        return Oracle(self.oracle_dir or self.model_dir, DTYPES[self.dtype], self.device, self.oracle_attn)

    def ours(self) -> list[list[int]]:
        """Our greedy ids through engine.LLM.generate: the decode program users run, at temperature 0."""
        return greedy(self.llm(), self.prompts, self.max_new_tokens)

    def ours_with_logprobs(self) -> tuple[list[list[int]], EngineLogprobs]:
        """Our greedy ids through `LLM.generate` and, per position, the engine's own log-probs of its TOP_LOGPROBS
        most probable tokens (raw, before sampling: engine/logprobs.py)."""
        params = SamplingParams(temperature=0.0, max_tokens=self.max_new_tokens, ignore_eos=True, logprobs=TOP_LOGPROBS)
        outs = self.llm().generate([list(p) for p in self.prompts], params)
        tops: EngineLogprobs = []
        for out in outs:
            if out.logprobs is None or any(pos is None for pos in out.logprobs):
                raise RuntimeError("the engine returned no logprobs where they were asked for: nothing to compare")
            tops.append([{t: lp.logprob for t, lp in pos.items()} for pos in out.logprobs if pos is not None])
        return [out.token_ids for out in outs], tops


def tokens(setup: Setup, oracle: Oracle | None = None, ours: list[list[int]] | None = None) -> GateResult:
    oracle = oracle or setup.oracle()
    theirs = [oracle.greedy(p, setup.max_new_tokens) for p in setup.prompts]
    result = token_gate(setup.prompts, setup.ours() if ours is None else ours, theirs)
    result.details["comparator_selftest"] = token_selftest(setup.prompts, theirs)
    return result


def neartie(
    setup: Setup,
    band: float = DEFAULT_BAND,
    top_k: int = DEFAULT_TOP_K,
    ours: list[list[int]] | None = None,
    oracle: Oracle | None = None,
    max_near_tie_rate: float = DEFAULT_MAX_NEAR_TIE_RATE,
    arbiter: Oracle | None = None,
    max_out_of_band_rate: float = DEFAULT_MAX_OUT_OF_BAND_RATE,
    engine_logprobs: EngineLogprobs | None = None,
    max_logprob_dist: float | None = None,
) -> GateResult:
    """The near-tie razor. With `arbiter` (`fp32_twin`), a position out of band against the oracle is judged
    again against it: it fails only when our token is out of band there too (a near-tie otherwise, counted in
    the budget). Only the prompts with such a position are teacher-forced through the twin. With
    `max_logprob_dist` the run also fails when the mean log-prob distance of `engine_logprobs` (our ids' own,
    `Setup.ours_with_logprobs`) from the oracle's exceeds it (`logprob_distance`); the token judgement is unchanged."""
    if max_logprob_dist is not None and (engine_logprobs is None or ours is None):
        raise ValueError("max_logprob_dist: needs the engine's log-probs on our ids (Setup.ours_with_logprobs)")
    ours = ours if ours is not None else setup.ours()
    oracle = oracle or setup.oracle()
    logprobs = [oracle.teacher_forced_logprobs(p, t) for p, t in zip(setup.prompts, ours)]
    result = _token_razor(setup, ours, logprobs, band, top_k, max_near_tie_rate, arbiter, max_out_of_band_rate)
    if engine_logprobs is not None:  # without a limit, measured and said, not judged
        logprob_rule(result, logprob_distance(engine_logprobs, logprobs), max_logprob_dist)
    return result


def _token_razor(
    setup: Setup,
    ours: list[list[int]],
    logprobs: list[torch.Tensor],
    band: float,
    top_k: int,
    max_near_tie_rate: float,
    arbiter: Oracle | None,
    oob: float,
) -> GateResult:
    razor = near_tie_gate(setup.prompts, ours, logprobs, band, top_k, max_near_tie_rate, max_out_of_band_rate=oob)
    razor.details["comparator_selftest"] = razor_selftest(logprobs, band, top_k)
    if arbiter is None or not razor.details["counts"][OUT_OF_BAND]:
        return razor
    late = {r["prompt"] for r in razor.details["not_exact"] if r["verdict"] == OUT_OF_BAND}
    twins = [
        arbiter.teacher_forced_logprobs(p, t) if i in late else None
        for i, (p, t) in enumerate(zip(setup.prompts, ours))
    ]
    judged = near_tie_gate(
        setup.prompts, ours, logprobs, band, top_k, max_near_tie_rate, arbiter=twins, max_out_of_band_rate=oob
    )
    judged.details["comparator_selftest"] = razor.details["comparator_selftest"]
    return judged


def logprob_distance(engine: EngineLogprobs, oracle: list[torch.Tensor]) -> dict[str, float]:
    """Per position, the largest |our log-prob - the oracle's| over our most probable tokens (same ids, the
    oracle teacher-forced on ours); its mean over the run (what the rule judges) and its max. A changed function
    moves it in fp32 far above fp32 noise, a moved bf16 rounding point more than a reordering of fp32 sums does."""
    per = [
        max(abs(v - lp[i, t].item()) for t, v in tops[i].items())
        for tops, lp in zip(engine, oracle, strict=True)
        for i in range(lp.shape[0])
    ]
    if not per:
        raise ValueError("logprob_distance: no positions: nothing was compared")
    return {"mean": sum(per) / len(per), "max": max(per), "positions": len(per)}


def logprob_rule(result: GateResult, dist: dict[str, float], limit: float | None) -> None:
    """Apply the log-prob rule to a token razor's result in place: over `limit` fails it, named in the summary
    (None: the distance is measured and said, not judged)."""
    over = limit is not None and dist["mean"] > limit
    result.details["logprob_dist"] = {**dist, "limit": limit, "passed": None if limit is None else not over}
    judged = "not judged" if limit is None else f"{'exceeds' if over else 'within'} the limit {limit:g}"
    said = (
        f"log-prob distance {dist['mean']:.3g} nats (mean over {dist['positions']} positions of the largest "
        f"|ours - oracle| over our top {TOP_LOGPROBS}) {judged}"
    )
    if over:  # the failure first, where a reader looks for it
        result.verdict = FAIL
        result.summary = f"{said}; {result.summary}"
    else:
        result.summary += f"; {said}"


def fp32_twin(model_dir: Path, dtype: torch.dtype, device: str) -> Oracle:
    """The oracle with the weights rounded to `dtype` (as the engine and the oracle load them) and every
    operation in fp32: the arithmetic without the dtype's rounding points, on the same function. (The checkpoint's
    own fp32 weights are another function: on the reach gate's `long` model, bf16 and fp32 weights pick
    differently at a third of the positions.)"""
    twin = Oracle(model_dir, dtype, device)
    twin.model = twin.model.float()
    return twin


def per_dtype(results: dict[str, GateResult], key: str = "dtype") -> GateResult:
    """One gate run in several dtypes (or several runs) as one result: each row tagged with its dtype (its run's
    label, under `key`); it passes when every one does."""
    first = next(iter(results.values()))
    if len(results) == 1:
        return first
    table = [{key: dt, **row} for dt, r in results.items() for row in r.table]
    verdict = PASS if all(r.passed for r in results.values()) else FAIL
    summary = "; ".join(f"{dt}: {r.verdict}: {r.summary}" for dt, r in results.items())
    return GateResult(first.gate, verdict, summary, table, {dt: r.details for dt, r in results.items()})


def distributional(setup: Setup, runs: int, oracle: Oracle | None = None) -> GateResult:
    oracle = oracle or setup.oracle()
    oracle_runs = [[oracle.greedy(p, setup.max_new_tokens) for _ in range(runs)] for p in setup.prompts]
    return distributional_gate(setup.prompts, setup.ours(), oracle_runs)


def check_golden(path: Path, model_dir: Path | None = None) -> GateResult:
    case = gold.read_golden(path)
    setup = Setup(
        model_dir or resolve_model(case["model"]),
        case["prompts"],
        case["max_new_tokens"],
        case["dtype"],
        case["device"],
    )
    return gold.golden_gate(path, setup.ours())


def regen(
    path: Path,
    setup: Setup,
    model_name: str,
    band: float,
    top_k: int,
    ledger_dir: Path | None,
    command: str,
    max_near_tie_rate: float = DEFAULT_MAX_NEAR_TIE_RATE,
    allow_dirty: bool = False,
) -> tuple[GateResult, Path | None]:
    """Rewrite a golden from our current ids only if they pass the near-tie gate; then write a ledger record."""
    ours = setup.ours()
    result = neartie(setup, band, top_k, ours=ours, max_near_tie_rate=max_near_tie_rate)
    if not result.passed:
        return result, None
    previous = gold.read_golden(path) if path.exists() else None
    case = gold.make_golden(model_name, setup.dtype, setup.device, setup.max_new_tokens, setup.prompts, ours)
    gold.write_golden(path, case)
    changed = None if previous is None else [i for i, (a, b) in enumerate(zip(previous["tokens"], ours)) if a != b]
    root = repo_root()
    ledger_dir = ledger_dir or (root or Path.cwd()) / ".agents" / "ledger"
    record = write_record(
        ledger_dir,
        f"regen-{path.stem}",
        ["ENGINE-GATES"],
        command,
        device_name(setup.device),
        f"regenerated {path.name} under the near-tie gate: {result.summary}",
        {
            "golden": path.name,
            "sha256": case["sha256"],
            "previous_sha256": previous and previous["sha256"],
            "changed_prompts": changed,
            "neartie": result.details,
        },
        flags=setup.flags,
        selftest=selftest_counts(result),
        allow_dirty=allow_dirty,
    )
    return result, record


def selftest_counts(result: GateResult) -> tuple[int, int] | None:
    """(seeded, caught) of the comparator self-test a gate ran beside its comparison, if it ran one."""
    test = result.details.get("comparator_selftest")
    return (test["seeded"], test["caught"]) if isinstance(test, dict) and test.get("seeded") else None


def resolve_model(name: str) -> Path:
    """A golden's model field: `tiny-qwen3` is the embedded model, anything else a directory."""
    return TINY_MODEL if name == "tiny-qwen3" else Path(name)


def device_name(device: str) -> str:
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return "cpu"
