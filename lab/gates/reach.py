"""Attention reach gate: every gate model through the token gate and the near-tie razor, once per attention arm.

`python -m lab gate reach [--out DIR] [--models ...] [--arms ...]` (or `python -m lab.gates.reach`).
For each arm of the kernel table's attention ops (engine/kernels/) it derives the flag setting that puts
that arm first (its own flags on, each earlier arm's off; a by-name arm, outside the default order, is named in
the snapshot instead), runs every gate model
(lab/data/gate_models.py) that the arm takes under it, and records which arms each run reached (the
table's selection counters). The reach table comes last: per arm, its calls and the models that reached
it. Exit 1 when an arm has 0 calls, or when a run with the default flags fails the near-tie razor (a run
with a default-OFF flag on is reported, not judged: it is the evidence a flip owes); 2 on usage errors.
Each run's razor has its arm's setting (engine/kernels/table.py `Arm.razor`: the one-pass arm, which keeps fp32
probabilities, against the SDPA oracle at the fp32-probs budgets), named in its line when not eager.
Arms run only on CUDA tensors, so on a CPU every arm shows 0 and the gate fails.

In bf16 a position out of band against the oracle is judged again by the oracle's fp32 twin (the same
bf16-rounded weights in fp32 arithmetic): it fails only when out of band there too, else it is a near-tie in
the budget (at 1600-token contexts the bf16 oracle's own margins differ from the twin's by up to 2 nats; the
row's spec). Reported beside the verdicts, not judged: the oracle's own greedy ids through the razor, the
twin's view of every position that is not exact, and (`--tiled-splits`) the tiled arm with its split count
forced.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from engine import kernels
from engine.cuda import paged_attn_tiled as cuda_tiled
from engine.flags import FLAGS, FlagSnapshot
from engine.llm import LLM
from engine.model.config import load_config
from engine.sampling_params import SamplingParams
from lab.data.gate_models import GATE_MODELS, GateModel, write_gate_models
from lab.gates import harness
from lab.gates.neartie import (
    DEFAULT_BAND,
    DEFAULT_MAX_NEAR_TIE_RATE,
    DEFAULT_TOP_K,
    OUT_OF_BAND,
    OUTSIDE_TOP_K,
    classify,
    near_tie_gate,
)
from lab.gates.oracle import Oracle
from lab.gates.tokens import RAZOR_NEW_TOKENS, default_prompts, token_gate

# the ops whose arms the gate must reach: every attention op of the table
ATTENTION_OPS = tuple(name for name in kernels.TABLE if name.endswith("attention"))


@dataclass(frozen=True)
class Setting:
    """The flags that make `arm` the first enabled arm of `op` (the rest of the flags at their defaults), or for a
    by-name arm (`by_name`) the default flags with the arm named in the snapshot (`kernels.naming`).

    `splits` forces the tiled arm's KV split count (`--tiled-splits`, a diagnostic run: reported, not judged)."""

    op: str
    arm: str
    flags: dict[str, bool]
    splits: int | None = None
    by_name: bool = False

    @property
    def name(self) -> str:
        return f"{self.op}/{self.arm}" + (f"@s{self.splits}" if self.splits else "")

    @property
    def default(self) -> bool:
        """Whether every flag here is at its default and nothing else is forced: the run users get."""
        return self.splits is None and not self.by_name and all(FLAGS[f].default == v for f, v in self.flags.items())

    def snapshot(self) -> FlagSnapshot:
        flags = FlagSnapshot.defaults().with_(**self.flags)
        return kernels.naming(flags, self.op, self.arm) if self.by_name else flags

    def razor(self) -> kernels.Razor:
        """The near-tie razor's setting the arm is judged with (the kernel table's `Arm.razor`; eager for a name
        that is not an arm of the table)."""
        op = kernels.TABLE.get(self.op)
        names = [a.name for a in (*op.arms, *op.by_name)] if op else []
        return op.arm(self.arm).razor if op and self.arm in names else kernels.EAGER_RAZOR

    def describe(self) -> str:
        changed = [f"{f}={int(v)}" for f, v in sorted(self.flags.items()) if FLAGS[f].default != v]
        changed += ["by name"] if self.by_name else []
        return " ".join(changed) or "defaults"


def settings(ops: tuple[str, ...] = ATTENTION_OPS) -> list[Setting]:
    """One setting per arm of each op, in the table's order: the arm's flags on, and for each arm before it
    the first of its flags that this arm does not need, off (an earlier arm gated by a subset of this arm's
    flags stays on and must decline by shape); then one per by-name arm, named at the default flags."""
    out = []
    for name in ops:
        op = kernels.TABLE[name]
        for i, arm in enumerate(op.arms):
            flags = dict.fromkeys(arm.flags, True)
            for earlier in op.arms[:i]:
                off = next((f for f in earlier.flags if f not in arm.flags), None)
                if off is not None:
                    flags[off] = False
            out.append(Setting(name, arm.name, flags))
        out += [Setting(name, arm.name, {}, by_name=True) for arm in op.by_name]
    return out


# which gate models a setting runs: the shapes its arm is compiled for (the table's supports, in words), so
# the gate does not spend its time on runs that only fall through; a new arm runs every model
def takes(setting: Setting, model: GateModel) -> bool:
    d, g = model.head_dim, model.group
    rules = {
        "tiled_onepass": d in (64, 128, 256) and g <= 8,  # its compiled shapes (256: where two blocks fit per SM)
        "tiled_fused": model.name in ("long", "d128-g4"),
        "tiled_pipelined_pdl": g <= 8 and model.name != "long",  # long's batch of grids is past 2 blocks per SM
        "tiled_pipelined": g <= 8,  # the tiled arm's groups
        "tiled": True,  # d128-g16 falls to the generic arm (more than 8 query heads per KV head): the notice
        "splitkv_swap": g in (1, 2, 4, 8),  # by name
        "warp_d128": d == 128,  # by name
        "generic": model.name in ("d64-g1", "d128-g16", "long"),
    }
    if setting.op != "paged_decode_attention":  # prefill and extend arms: head_dim 64, 128 and 256, with a window
        return model.name in ("d128-g4", "d256-g8", "d64-g1")
    return rules.get(setting.arm, True)


# arms that take only another dtype than the gate's: the varlen extend kernel's one-decode-row-per-token arm
# is its fp32 path (bf16/fp16 take the tensor-core arm)
ARM_DTYPES = {("extend_attention", "decode_rows"): "float32"}


@dataclass
class Run:
    model: str
    setting: Setting
    tokens: str  # the token gate's verdict line
    neartie: str  # the razor's
    razor_passed: bool
    ran: Counter[tuple[str, str]] = field(default_factory=Counter)  # (op, arm) -> calls, attention ops only
    fallbacks: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    seconds: float = 0.0
    not_exact: list[dict[str, Any]] = field(default_factory=list)  # the razor's rows that are not exact

    def attention_arms(self) -> str:
        return ", ".join(f"{op}/{arm} {n}" for (op, arm), n in sorted(self.ran.items())) or "none"


def run_model(
    model: GateModel,
    path: Path,
    setting: Setting,
    oracle: Oracle,
    theirs: list[list[int]],
    prompts: list[list[int]],
    new_tokens: int,
    device: str,
    dtype: str,
    arbiter: Oracle | None = None,
    judge: Oracle | None = None,
) -> Run:
    """One gate model under one setting: our greedy ids through the token gate and the razor (teacher-forcing
    `judge`, the oracle with the attention of the arm's razor setting; default `oracle`); the counters.
    With `arbiter` (`harness.fp32_twin`), each position out of band against the oracle is judged again against it
    (`harness.neartie`), and every position that is not exact carries its view (`fp32_rows`)."""
    t0 = time.perf_counter()
    kernels.reset_counts()
    setup = harness.Setup(path, prompts, new_tokens, dtype, device, flags=setting.snapshot())
    bar = setting.razor()
    # the setting's log-prob rule, against its own oracle (`judge`); a served extend run has no engine log-probs
    limit = bar.logprob_limit(dtype) if judge is not None and setting.op != "extend_attention" else None
    tops = None
    with forced_tiled_splits(setting.splits):
        if setting.op == "extend_attention":
            ours = served(setup)
        elif limit is not None:
            ours, tops = setup.ours_with_logprobs()
        else:
            ours = setup.ours()
    seen = kernels.counts()
    tokens = token_gate(prompts, ours, theirs)
    razor = harness.neartie(
        setup,
        ours=ours,
        oracle=judge or oracle,
        max_near_tie_rate=bar.max_near_tie_rate,
        arbiter=arbiter,
        max_out_of_band_rate=bar.max_out_of_band_rate,
        engine_logprobs=tops,
        max_logprob_dist=limit,
    )
    rows = [{**r, "context": len(prompts[r["prompt"]]) + r["pos"]} for r in razor.details["not_exact"]]
    return Run(
        model.name,
        setting,
        f"{tokens.verdict}: {tokens.summary}",
        f"{razor.verdict}: {razor.summary}",
        razor.passed,
        Counter({k: n for k, n in seen.ran.items() if k[0] in ATTENTION_OPS}),
        Counter({k: n for k, n in seen.fallbacks.items() if k[0] in ATTENTION_OPS}),
        time.perf_counter() - t0,
        fp32_rows(rows, prompts, ours, arbiter) if arbiter is not None else rows,
    )


def fp32_rows(
    rows: list[dict[str, Any]], prompts: list[list[int]], ours: list[list[int]], arbiter: Oracle
) -> list[dict[str, Any]]:
    """The razor's rows that are not exact, each with the fp32 twin's view of the same position (teacher-forced
    on the same ids): `fp32_verdict` (the razor's classification against it), `fp32_gap` (its best log-prob
    minus our token's) and `fp32_margin` (its log-prob of the bf16 oracle's pick minus our token's; <= 0: fp32
    ranks our token at least as high). What tells a bf16 oracle's own rounding from a kernel's error."""
    out = []
    cache: dict[int, torch.Tensor] = {}
    for r in rows:
        i = r["prompt"]
        if i not in cache:
            cache[i] = arbiter.teacher_forced_logprobs(prompts[i], ours[i])
        lp = cache[i][r["pos"]]
        fp32 = classify(lp, r["ours"], DEFAULT_BAND, DEFAULT_TOP_K)
        out.append(
            {
                **r,
                "fp32_verdict": fp32["verdict"],
                "fp32_gap": fp32["gap"],
                "fp32_margin": (lp[r["oracle_top1"]] - lp[r["ours"]]).item(),
            }
        )
    return out


def oracle_self_run(
    model: GateModel, oracle: Oracle, theirs: list[list[int]], prompts: list[list[int]], arbiter: Oracle | None
) -> Run:
    """The oracle's own greedy ids (transformers' KV-cached generate) through the razor against its teacher-forced
    log-probs: how far the oracle is from itself in this dtype. Reported, never judged."""
    t0 = time.perf_counter()
    logprobs = [oracle.teacher_forced_logprobs(p, t) for p, t in zip(prompts, theirs)]
    razor = near_tie_gate(prompts, theirs, logprobs, max_near_tie_rate=DEFAULT_MAX_NEAR_TIE_RATE)
    rows = [{**r, "context": len(prompts[r["prompt"]]) + r["pos"]} for r in razor.details["not_exact"]]
    return Run(
        model.name,
        ORACLE_SELF,
        "-",
        f"{razor.verdict}: {razor.summary}",
        razor.passed,
        seconds=time.perf_counter() - t0,
        not_exact=fp32_rows(rows, prompts, theirs, arbiter) if arbiter is not None else rows,
    )


# the oracle judged against itself: not an arm, never in the reach table or the verdict
ORACLE_SELF = Setting("oracle", "generate", {}, splits=None)


@contextmanager
def forced_tiled_splits(splits: int | None) -> Iterator[None]:
    """Within: the tiled arm's KV split count is `splits` whatever the shape (None: its own rule)."""
    if splits is None:
        yield
        return
    saved = cuda_tiled.num_splits
    cuda_tiled.num_splits = lambda *args, **kwargs: splits  # type: ignore[assignment]
    try:
        yield
    finally:
        cuda_tiled.num_splits = saved


SERVE_CHUNK = 32  # tokens per serving step at least; a third of the longest context where that is more


def served(setup: harness.Setup) -> list[list[int]]:
    """Our greedy ids through engine.LLM with chunked prefill (each step's token budget a third of the longest
    context, decode rows beside prefill chunks): the path that runs extend_attention, which the other gates'
    one-step prefill of the whole batch (harness.Setup.ours) does not."""
    longest = max(len(p) for p in setup.prompts) + setup.max_new_tokens
    llm = LLM(
        setup.model_dir,
        setup.dtype,
        setup.device,
        max_num_seqs=len(setup.prompts),
        max_model_len=-(-longest // 16) * 16,
        max_num_batched_tokens=max(SERVE_CHUNK, longest // 3),
        enable_prefix_caching=False,
        flags=setup.flags,
    )
    greedy = SamplingParams(temperature=0.0, max_tokens=setup.max_new_tokens, ignore_eos=True)
    return [out.token_ids for out in llm.generate(setup.prompts, greedy)]


def reach_table(runs: list[Run], wanted: list[Setting]) -> tuple[list[dict[str, Any]], list[str]]:
    """Per arm of the attention ops: its calls over every run and the models that reached it; the arms at 0."""
    rows, missing = [], []
    for s in wanted:
        calls = sum(r.ran[(s.op, s.arm)] for r in runs)
        models = sorted({r.model for r in runs if r.ran[(s.op, s.arm)]})
        rows.append({"arm": s.name, "flags": s.describe(), "calls": calls, "models": " ".join(models) or "-"})
        if calls == 0:
            missing.append(s.name)
    for op in ATTENTION_OPS:  # an op without arms runs its reference everywhere: listed, not required
        if not kernels.TABLE[op].arms:
            calls = sum(r.ran[(op, kernels.REFERENCE_ARM)] for r in runs)
            rows.append({"arm": f"{op}/reference", "flags": "(no arm yet)", "calls": calls, "models": "all"})
    return rows, missing


# the two-pass tiled arm the split count is forced on (`forced_tiled_splits` patches its module's rule, not the
# one-pass arm's): the default before VT_ATTN_ONEPASS's flip
FORCED_SPLITS_ARM = "tiled_pipelined_pdl"


def forced_split_settings(wanted: list[Setting], model: GateModel, splits: list[int]) -> list[Setting]:
    """The two-pass tiled setting again with each of `splits` forced, where the tiled arm takes the model."""
    if not splits or not cuda_tiled.supports(model.head_dim, model.group, torch.bfloat16):
        return []
    tiled = [s for s in wanted if s.op == "paged_decode_attention" and s.arm == FORCED_SPLITS_ARM]
    return [Setting(s.op, s.arm, s.flags, n) for s in tiled for n in splits]


def log_run(run: Run, line: str, log: Any) -> None:
    """A run's line on stdout; it, its verdicts, fallbacks and every position that is not exact in the log."""
    print(line, flush=True)
    print(f"{line}\n  tokens: {run.tokens}\n  neartie: {run.neartie}", file=log)
    for (op, arm, needs), n in sorted(run.fallbacks.items()):
        print(f"  fallback {op}/{arm} {n}: needs {needs}", file=log)
    for r in run.not_exact:
        fp32 = (
            f"  | fp32: {r['fp32_verdict']} gap {r['fp32_gap']:.4f}, oracle's pick ahead by {r['fp32_margin']:.4f}"
            if "fp32_verdict" in r
            else ""
        )
        print(
            f"  {r['verdict']}: prompt {r['prompt']} pos {r['pos']} context {r['context']} "
            f"gap {r['gap']:.6f} oracle margin {r['oracle_margin']:.6f}{fp32}",
            file=log,
        )
    if run.not_exact and "fp32_verdict" in run.not_exact[0]:
        bad = sum(r["fp32_verdict"] in (OUT_OF_BAND, OUTSIDE_TOP_K) for r in run.not_exact)
        print(
            f"  fp32 arbiter: {bad} of {len(run.not_exact)} positions that are not exact are out of band against fp32",
            file=log,
        )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    wanted = [s for s in settings() if not args.arms or s.arm in args.arms or s.name in args.arms]
    names = args.models or list(GATE_MODELS)
    unknown = [n for n in names if n not in GATE_MODELS]
    if unknown or (args.arms and not wanted):
        what = f"no gate model {', '.join(unknown)}" if unknown else f"no arm {', '.join(args.arms)}"
        print(f"error: {what} (models: {', '.join(GATE_MODELS)}; arms: {', '.join(s.name for s in settings())})")
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda: no CUDA device; the arms run only on one", file=sys.stderr)
        return 1
    out = args.out or Path(tempfile.mkdtemp(prefix="reach-"))
    out.mkdir(parents=True, exist_ok=True)
    dirs = write_gate_models(args.models_dir or out / "models", names)
    runs: list[Run] = []
    selves: list[Run] = []  # the oracle against itself, per model and dtype: reported, never judged
    log = (out / "reach-runs.txt").open("w")
    start, skipped = time.perf_counter(), 0
    for name in names:
        if args.time_limit and time.perf_counter() - start > args.time_limit:
            skipped += 1
            print(f"{name:9s} not run: past --time-limit {args.time_limit}s", flush=True)
            continue
        model = GATE_MODELS[name]
        prompts = default_prompts(load_config(dirs[name]).vocab_size, args.seed, model.prompt_lens[: args.prompts])
        oracles: dict[str, tuple[Oracle, list[list[int]]]] = {}  # per dtype: the same for every arm
        judges: dict[tuple[str, str], Oracle] = {}  # per (dtype, oracle attention): the razor's oracle
        arbiter = None  # fp32_twin: judges the positions that are not exact (bf16 and fp16 runs), reported only
        for s in [*(s for s in wanted if takes(s, model)), *forced_split_settings(wanted, model, args.tiled_splits)]:
            dtype = ARM_DTYPES.get((s.op, s.arm), args.dtype)
            if arbiter is None and args.fp32_arbiter and dtype != "float32":
                arbiter = harness.fp32_twin(dirs[name], harness.DTYPES[dtype], args.device)
            if dtype not in oracles:
                oracle = Oracle(dirs[name], harness.DTYPES[dtype], args.device)
                oracles[dtype] = oracle, [oracle.greedy(p, args.max_new_tokens) for p in prompts]
                if args.oracle_self:
                    own = oracle_self_run(
                        model, oracle, oracles[dtype][1], prompts, None if dtype == "float32" else arbiter
                    )
                    selves.append(own)
                    log_run(
                        own,
                        f"{name:9s} {own.setting.name:36s} {dtype:8s} {'self':8s} {own.seconds:5.1f}s  "
                        f"neartie {own.neartie.split(':')[0]}  (transformers' generate against its teacher-forced "
                        "log-probs)",
                        log,
                    )
            oracle, theirs = oracles[dtype]
            attn = s.razor().oracle_attn  # an arm that keeps fp32 probabilities: the online oracle
            judges.setdefault((dtype, "eager"), oracle)
            if (dtype, attn) not in judges:
                judges[dtype, attn] = Oracle(dirs[name], harness.DTYPES[dtype], args.device, attn)
            twin = arbiter if dtype != "float32" else None
            run = run_model(
                model,
                dirs[name],
                s,
                oracle,
                theirs,
                prompts,
                args.max_new_tokens,
                args.device,
                dtype,
                twin,
                judge=judges[dtype, attn],
            )
            runs.append(run)
            kind = "default" if s.default else "forced" if s.splits else "by name" if s.by_name else "flag on"
            bar = "" if s.razor() == kernels.EAGER_RAZOR else f" ({s.razor().name})"  # the razor's setting
            line = (
                f"{name:9s} {s.name:36s} {dtype:8s} {kind:8s} {run.seconds:5.1f}s  "
                f"tokens {run.tokens.split(':')[0]}  neartie {run.neartie.split(':')[0]}{bar}  [{run.attention_arms()}]"
            )
            log_run(run, line, log)
        oracles.clear()
        judges.clear()
    log.close()
    rows, missing = reach_table(runs, wanted)
    bad_default = [r for r in runs if r.setting.default and not r.razor_passed]
    ok = not missing and not bad_default and bool(runs)
    late = f", {skipped} models not run (time limit)" if skipped else ""
    verdict = (
        f"reach: {'PASS' if ok else 'FAIL'}: {len(rows)} attention arms, {len(runs)} runs, "
        f"{len(missing)} arms at 0 calls{late}"
    )
    (out / "reach.json").write_text(
        json.dumps(
            {
                "passed": ok,  # the verdict `python -m lab ci reach` reads
                "examined": len(runs),
                "summary": verdict,
                "runs": [
                    {
                        "model": r.model,
                        "setting": r.setting.name,
                        "flags": r.setting.describe(),
                        "tokens": r.tokens,
                        "neartie": r.neartie,
                        "arms": {f"{op}/{arm}": n for (op, arm), n in sorted(r.ran.items())},
                        "not_exact": r.not_exact,
                    }
                    for r in runs
                ],
                "oracle_self": [{"model": r.model, "neartie": r.neartie, "not_exact": r.not_exact} for r in selves],
                "reach": rows,
                "missing": missing,
            },
            indent=1,
        )
        + "\n"
    )
    print()
    print(render(rows))
    print_diagnostics(runs, selves)
    for bad in bad_default:
        print(f"FAIL: {bad.model} with the default flags fails the near-tie razor: {bad.neartie}")
    for arm in missing:
        print(f"FAIL: no gate model reached {arm} (0 calls)")
    print(verdict)
    return 0 if ok else 1


def print_diagnostics(runs: list[Run], selves: list[Run]) -> None:
    """After the table, reported, not judged: the oracle against itself on each model, the forced-split
    runs (on `long`, or failing), and each out-of-band position of a default run with the fp32 twin's view."""
    lines = [f"  {r.model:9s} {r.setting.name:30s} {r.neartie}" for r in selves]
    lines += [
        f"  {r.model:9s} {r.setting.name:30s} {r.neartie}"
        for r in runs
        if r.setting.splits and (r.model == "long" or not r.razor_passed)
    ]
    for r in runs:
        if not r.setting.default:
            continue
        for row in r.not_exact:
            if (row["verdict"] in (OUT_OF_BAND, OUTSIDE_TOP_K) or "arbiter_verdict" in row) and "fp32_verdict" in row:
                lines.append(
                    f"  {r.model:9s} {r.setting.name:30s} prompt {row['prompt']} pos {row['pos']} context "
                    f"{row['context']}: gap {row['gap']:.2f} against the oracle ({row['verdict']} with the twin); "
                    f"the fp32 twin: {row['fp32_verdict']}, "
                    f"gap {row['fp32_gap']:.3f}, the oracle's pick ahead by {row['fp32_margin']:.3f}"
                )
    if lines:
        print("diagnostics (reported, not judged):")
        print("\n".join(lines))


def render(rows: list[dict[str, Any]]) -> str:
    cols = ["arm", "calls", "models", "flags"]
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in cols] if rows else [len(c) for c in cols]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(str(r[c]).ljust(w) for c, w in zip(cols, widths)) for r in rows]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m lab gate reach", description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="default cuda (arms run only there)")
    p.add_argument("--dtype", choices=sorted(harness.DTYPES), default="bfloat16")
    p.add_argument("--out", type=Path, help="reach-runs.txt (every run's verdicts and fallbacks) and reach.json")
    p.add_argument("--models-dir", type=Path, help="where the gate models are written (default: OUT/models)")
    p.add_argument("--models", nargs="+", metavar="NAME", help=f"gate models (default: {' '.join(GATE_MODELS)})")
    p.add_argument("--arms", nargs="+", metavar="ARM", help="arms (default: every attention arm of the table)")
    p.add_argument("--prompts", type=int, default=None, help="the first N of each model's prompts (default: all 16)")
    p.add_argument("--max-new-tokens", type=int, default=RAZOR_NEW_TOKENS)
    p.add_argument("--seed", type=int, default=0, help="seed of the prompts")
    p.add_argument(
        "--tiled-splits",
        type=int,
        nargs="*",
        default=[],
        metavar="N",
        help="also run the two-pass tiled setting (tiled_pipelined_pdl) with its KV split count forced to each N "
        "(reported, not judged)",
    )
    p.add_argument(
        "--no-fp32-arbiter",
        dest="fp32_arbiter",
        action="store_false",
        help="judge by the oracle alone: by default a position out of band against it is judged again by its fp32 "
        "twin (the same weights in fp32 arithmetic) and fails only if out of band there too",
    )
    p.add_argument(
        "--no-oracle-self",
        dest="oracle_self",
        action="store_false",
        help="do not run the oracle's own greedy ids through the razor (reported only)",
    )
    p.add_argument(
        "--time-limit",
        type=float,
        default=None,
        metavar="S",
        help="start no further model after S seconds; the table still comes last (arms left at 0 fail)",
    )
    return p


if __name__ == "__main__":
    raise SystemExit(main())
