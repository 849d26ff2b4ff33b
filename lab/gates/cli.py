"""`python -m lab gate <name>`: the gates' subcommands, each printing its table and verdict."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import torch

from engine import kernels
from engine.cli_args import add_model_args, parse_ids
from engine.flags import FlagSnapshot
from engine.model.config import checkpoint_dtype, load_config
from engine.runner import DTYPES, resolve_dtype
from lab.bench.attn_peers import FLASHINFER_WANTED
from lab.gates import harness, peer_attention
from lab.gates.distributional import DEFAULT_RUNS
from lab.gates.goldens import GOLDENS_DIR
from lab.gates.ledger import write_record
from lab.gates.neartie import DEFAULT_BAND, DEFAULT_MAX_NEAR_TIE_RATE, DEFAULT_TOP_K
from lab.gates.oracle import ATTN_IMPLEMENTATIONS, Oracle
from lab.gates.result import FAIL, PASS, GateResult
from lab.gates.served import DEFAULT_LOGPROB_TOL
from lab.gates.tokens import DEFAULT_PROMPT_LENS, RAZOR_NEW_TOKENS, RAZOR_PROMPT_LENS, default_prompts, diverged

DEFAULT_GOLDEN = GOLDENS_DIR / "tiny-qwen3-float32-cpu.json"


def add_gate_parser(sub: argparse._SubParsersAction) -> None:
    gate = sub.add_parser(
        "gate",
        help="gates against the transformers oracle",
        description="Gates that hold the engine to the transformers oracle. "
        "Also: `gate kernels ...` (kernel numerics), `gate reach ...` (attention arms reached) and `gate bench NAME ...`.",
    )
    gsub = gate.add_subparsers(dest="gate", required=True)

    def case(name: str, help_: str) -> argparse.ArgumentParser:
        p = gsub.add_parser(name, help=help_, description=help_)
        add_model_args(p)
        p.add_argument(
            "--prompt-ids",
            action="append",
            default=[],
            metavar="1,2,3",
            help="a prompt's token ids; repeat for a batch (default: seeded random prompts of lengths 1, 6, 13, 31)",
        )
        p.add_argument("--seed", type=int, default=0, help="seed of the default prompts")
        p.add_argument(
            "--prompt-lens",
            type=parse_lens,
            metavar="N,N,..",
            help="lengths of the seeded default prompts (default: 1,6,13,31; the near-tie razor's: its 16 lengths "
            "from 1 to 63); e.g. 1500 and more for the tiled arms' several KV splits",
        )
        p.set_defaults(default_lens=DEFAULT_PROMPT_LENS, razor=None)  # razor: the neartie gate's setting, described
        p.add_argument(
            "--oracle-model",
            type=Path,
            default=None,
            metavar="DIR",
            help="the directory transformers loads (default: --model); for a quantized --model, its "
            "dequantized twin (python -m lab.data.make_tiny_quant writes both)",
        )
        p.add_argument("--max-new-tokens", type=int, default=16)
        p.add_argument("--json", action="store_true", help="print the result as JSON")
        p.add_argument(
            "--require-arm",
            action="append",
            default=[],
            metavar="VT_FLAG",
            help="fail unless an arm gated by this flag ran (the flip protocol's proof that the arm "
            "under test was exercised); repeat for several",
        )
        return p

    p = add_peer_args(case("tokens", "Token-exact: our greedy ids equal transformers' generate, prompt by prompt."))
    p.add_argument(
        "--divergence-beside-peers",
        action="store_true",
        help="for an arm that is not bitwise: the production peers (--attn-peer) run first, then the engine, and each "
        "run's diverging prompts are reported beside the others', none judged on them. Over 16 new tokens correct "
        "kernels diverge from transformers' generate on 2 to 12 prompts of 16 (`lab gate spread`), so the count "
        "cannot tell a bug from a correct kernel: the near-tie razor judges such an arm. The gate still fails on a "
        "peer or a required arm that never ran. Each prompt's ids are digested in the table, so two runs (graphed and "
        "eager) can be held to the same ids",
    )
    p.set_defaults(handler=cmd_tokens)
    for name, handler, help_ in (
        (
            "neartie",
            cmd_neartie,
            "Near-tie razor: the oracle teacher-forced on our ids; a gap is tolerated "
            "only where the oracle's top two are within the band.",
        ),
        (
            "regen",
            cmd_regen,
            "Regenerate a golden from our ids, only if they pass the near-tie gate; writes a ledger record.",
        ),
    ):
        p = case(name, help_)
        p.add_argument("--band", type=float, default=DEFAULT_BAND, help="near-tie band in nats (default 0.5)")
        p.add_argument("--top-k", type=int, default=DEFAULT_TOP_K, help="outside the oracle's top-k is a divergence")
        p.add_argument(
            "--max-near-tie-rate",
            type=float,
            default=None,
            metavar="FRACTION",
            help=f"fail when near-ties exceed this fraction of the positions, at least one allowed (default "
            f"{DEFAULT_MAX_NEAR_TIE_RATE}; neartie: the setting of the arms under test, see --require-arm)",
        )
        p.set_defaults(handler=handler)
        if name == "neartie":
            add_peer_args(p)
            p.set_defaults(default_lens=RAZOR_PROMPT_LENS, max_new_tokens=RAZOR_NEW_TOKENS, dtype=None)
            p.add_argument(
                "--max-out-of-band-rate",
                type=float,
                default=None,
                metavar="FRACTION",
                help="allow this fraction of the positions out of band, weighted by context as near-ties are, rounded "
                "down (default 0: none; neartie: the setting of the arms under test). The fp32-probs setting, for an "
                "arm that keeps fp32 probabilities, judged against the online oracle, allows 0.004 and adds the "
                "log-prob rule (engine/kernels/table.py FP32_PROBS_RAZOR)",
            )
            p.add_argument(
                "--razor-setting",
                dest="razor_name",
                choices=sorted(kernels.RAZORS),
                default=None,
                help="judge with this named setting (engine/kernels/table.py RAZORS) though no arm under test names "
                "it: how production kernels (--attn-peer) are calibrated against the setting that judges an arm",
            )
            p.add_argument(
                "--logprob-limit-from-peers",
                type=float,
                metavar="MARGIN",
                default=None,
                help="the log-prob rule's limit for the engine's runs from the production peers (--attn-peer) run "
                "first in the same process: MARGIN times the largest peer distance on the same ids' model and dtype, "
                "never below the setting's own limit; the peers' distances are measured, not judged (MARGIN >= 1)",
            )
            p.add_argument(
                "--served",
                metavar="URL",
                help="judge an OpenAI-compatible server's outputs instead of the engine's: each prompt through "
                "URL's /v1/completions (greedy, top_logprobs by token id), the oracle teacher-forced on its tokens, "
                "and its top_logprobs held to the oracle's (lab/gates/served.py)",
            )
            p.add_argument(
                "--outputs",
                type=Path,
                metavar="FILE",
                help="judge saved served outputs (JSON lines: prompt, tokens, top_logprobs) instead of a live server",
            )
            p.add_argument("--save-outputs", type=Path, metavar="FILE", help="with --served: write what it returned")
            p.add_argument(
                "--logprob-tol",
                type=float,
                default=DEFAULT_LOGPROB_TOL,
                help=f"with --served/--outputs: a served logprob further than this (nats) from the oracle's fails "
                f"(default {DEFAULT_LOGPROB_TOL})",
            )
            p.add_argument(
                "--fp32-arbiter",
                action="store_true",
                help="judge each position out of band against the bf16/fp16 oracle again against its fp32 twin "
                "(the same rounded weights, fp32 arithmetic): it fails only when out of band there too, else it "
                "counts as a near-tie; for long contexts, where the oracle's own rounding moves margins past the "
                "band (off by default: the seeded-bug suite's catch rates are measured without it)",
            )
            p.description = (
                f"{help_} Defaults: {len(RAZOR_PROMPT_LENS)} seeded prompts x {RAZOR_NEW_TOKENS} new tokens; "
                "without --dtype, the checkpoint's dtype and bfloat16 (a bf16 rounding bug is invisible in "
                "fp32), each judged on its own. With --require-arm, the oracle attention and the two budgets are "
                "the setting the kernel table names for the arms under test (engine/kernels/table.py `Arm.razor`: eager, "
                "or fp32-probs for an arm that keeps fp32 probabilities); each option given here wins over it."
            )
        if name == "regen":
            p.add_argument("--golden", type=Path, default=DEFAULT_GOLDEN, help="golden file to write")
            p.add_argument(
                "--ledger-dir", type=Path, default=None, help="where the record goes (default: <repo>/.agents/ledger)"
            )
            p.add_argument(
                "--allow-dirty",
                action="store_true",
                help="write the record from a tree that differs from HEAD (recorded)",
            )
    p = case(
        "distributional",
        "Relaxed gate, allowed only where the oracle's own greedy decoding is "
        "measured non-deterministic over K runs; refuses otherwise.",
    )
    p.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="oracle runs per prompt (K, at least 2)")
    p.set_defaults(handler=cmd_distributional)
    p = gsub.add_parser(
        "goldens",
        help="our ids against the committed goldens",
        description="Check our ids against committed golden files (sha256 verified).",
    )
    p.add_argument(
        "--golden",
        type=Path,
        action="append",
        default=[],
        help="golden file (default: every file in lab/gates/goldens)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_goldens)
    gsub.add_parser("kernels", help="kernel numerics gate (lab.gates.kernels; its own --help)", add_help=False)
    gsub.add_parser(
        "teeth",
        help="seeded-bug catch rates of the near-tie razor (lab.gates.teeth; its own --help)",
        add_help=False,
    )
    gsub.add_parser(
        "reach", help="every attention arm reached by a gate model (lab.gates.reach; its own --help)", add_help=False
    )
    gsub.add_parser(
        "spread",
        help="on how many prompts correct implementations leave the oracle's tokens (lab.gates.spread; its own --help)",
        add_help=False,
    )
    gsub.add_parser("bench", help="benchmarks (lab.bench.NAME; its own --help)", add_help=False)


def add_peer_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    peers = "; ".join(f"{n}: {peer.what}" for n, peer in peer_attention.PEERS.items())
    p.add_argument(
        "--attn-peer",
        action="append",
        choices=peer_attention.CHOICES,
        default=[],
        metavar="NAME",
        help=f"run the model with its paged decode attention taken by a peer, on the engine's paged cache and "
        f"block tables ({peers}); `engine`: the engine's own arms (the default). Repeat to judge several, each on "
        "its own, in one process. Decode steps run eager with a peer (its host reads cannot be captured); prefill "
        "attention stays the engine's. The gate fails when the peer ran 0 times. A dtype the peer does not take "
        f"is skipped, with the reason. FlashInfer: pip install {FLASHINFER_WANTED} (its kernels JIT-compile on first "
        "use). sdpa-cudnn: set TORCH_CUDNN_SDPA_AVOID_RECOMPILE=1, or cuDNN builds a graph per context length.",
    )
    p.add_argument(
        "--oracle-attn",
        action="append",
        choices=ATTN_IMPLEMENTATIONS,
        default=[],
        metavar="IMPL",
        help="transformers' attention in the oracle: eager (the default: it rounds scores and probabilities to the "
        "dtype, as the engine's reference does), sdpa (fp32 scores and probabilities, as FlashInfer and cuDNN "
        "keep them), or online (an online softmax's rounding points on every device: fp32 statistics, the "
        "probabilities rounded only for P.V; lab/gates/oracle.py); repeat to judge the same ids against each",
    )
    p.add_argument(
        "--ledger", type=Path, metavar="DIR", help="write one ledger record per run (peer x dtype x oracle) into DIR"
    )
    p.add_argument(
        "--row",
        action="append",
        default=[],
        metavar="ROW-ID",
        help="a roadmap row the record also evidences (repeatable), beside the gate's own (ENGINE-GATES)",
    )
    p.add_argument(
        "--allow-dirty",
        action="store_true",
        help="write the ledger record from a tree that differs from HEAD (recorded)",
    )
    return p


def parse_lens(text: str) -> tuple[int, ...]:
    try:
        lens = tuple(int(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated prompt lengths, e.g. 1,6,13") from None
    if not lens or min(lens) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every prompt length must be at least 1")
    return lens


def pick_razor(args: argparse.Namespace, snapshot: FlagSnapshot) -> str:
    """Fill in the near-tie razor's setting (oracle attention, budgets) the options leave open: that of the
    arms `--require-arm` names (the flip's arms under test), else eager; `--razor-setting` names one outright (the
    arms under test must agree). Arms of different settings are a usage error unless all three options are given.
    Returns the setting, described."""
    arms: dict[str, kernels.Razor] = {}
    for flag in args.require_arm:
        arms |= kernels.razors_gated_by(flag, snapshot)
    settings = set(arms.values())
    given = [bool(args.oracle_attn), args.max_near_tie_rate is not None, args.max_out_of_band_rate is not None]
    named = getattr(args, "razor_name", None)
    if named is not None:  # asked for by name: the arms under test, if any, must be judged by it too
        razor = kernels.RAZORS[named]
        others = sorted(f"{arm}: {r.name}" for arm, r in arms.items() if r != razor)
        if others:
            raise ValueError(f"--razor-setting {named}: the arms under test are judged otherwise ({'; '.join(others)})")
        source = f"{named}, asked for by --razor-setting" + (", options given here winning" if any(given) else "")
    elif len(settings) > 1 and not all(given):
        listed = "; ".join(f"{arm}: {r.name}" for arm, r in sorted(arms.items()))
        raise ValueError(
            f"the arms under test are judged with different razor settings ({listed}): flip them apart, or give "
            "--oracle-attn, --max-near-tie-rate and --max-out-of-band-rate"
        )
    elif settings == {kernels.EAGER_RAZOR} and not any(given):
        # arms under test that round as the reference does add no allowance: the run is judged by the setting of
        # the arms it takes (a default arm that keeps fp32 probabilities keeps its own; else eager), `razor_of_run`
        razor = kernels.EAGER_RAZOR
        source = f"eager, the setting of {', '.join(sorted(arms))}, unless the run takes an arm of another"
        args.razor_from_arms = True
    elif len(settings) == 1:
        razor = settings.pop()
        source = f"{razor.name}, the setting of {', '.join(sorted(arms))}"
        source += ", options given here winning" if any(given) else ""
    elif all(given):
        razor, source = kernels.EAGER_RAZOR, "the options given"  # every field is the command line's
    else:  # no arm under test: an engine run whose arms keep another setting is judged by it (`razor_of_run`)
        razor = kernels.EAGER_RAZOR
        source = "eager, the default" + (", options given here winning" if any(given) else "")
        args.razor_from_arms = not any(given)
    args.oracle_attn = args.oracle_attn or [razor.oracle_attn]
    args.razor_setting = razor  # its log-prob limits apply against its own oracle (`logprob_limit`)
    if args.max_near_tie_rate is None:
        args.max_near_tie_rate = razor.max_near_tie_rate
    if args.max_out_of_band_rate is None:
        args.max_out_of_band_rate = razor.max_out_of_band_rate
    limits = ", ".join(f"{dt} {v:g}" for dt, v in razor.max_logprob_dist)
    return (
        f"{source}: oracle attention {'/'.join(args.oracle_attn)}, near-ties at most {args.max_near_tie_rate}, out of band at most "
        f"{args.max_out_of_band_rate}"
        + (f", log-prob distance at most {limits} nats against the {razor.oracle_attn} oracle" if limits else "")
    )


def apply_razor(args: argparse.Namespace, razor: kernels.Razor) -> None:
    """The setting's oracle attention, budgets and log-prob rule, for the runs that follow."""
    args.oracle_attn = [razor.oracle_attn]
    args.razor_setting = razor
    args.max_near_tie_rate = razor.max_near_tie_rate
    args.max_out_of_band_rate = razor.max_out_of_band_rate


def razor_of_run(args: argparse.Namespace, ran: Counter[tuple[str, str]]) -> str | None:
    """With no arm under test and no option given, the setting of the arms an engine run took (a default arm that
    keeps fp32 probabilities is judged by the setting its flip was), else eager; set for the run, described. None:
    the options stand as given."""
    if not getattr(args, "razor_from_arms", False):
        return None
    took = kernels.razors_ran(ran)
    settings = set(took.values())
    if len(settings) > 1:
        listed = "; ".join(f"{arm}: {r.name}" for arm, r in sorted(took.items()))
        raise ValueError(f"the run took arms judged with different razor settings ({listed}): flip them apart")
    razor = settings.pop() if settings else kernels.EAGER_RAZOR
    apply_razor(args, razor)
    if not took:
        return "eager, the default (no arm of another setting ran)"
    return f"{razor.name}, the setting of {', '.join(sorted(took))}, the arm{'s' if len(took) > 1 else ''} that ran"


def logprob_limit(args: argparse.Namespace, dtype: str, attn: str) -> float | None:
    """The razor setting's log-prob limit for one run: only against the oracle it was measured with."""
    razor: kernels.Razor | None = getattr(args, "razor_setting", None)
    return razor.logprob_limit(dtype) if razor is not None and attn == razor.oracle_attn else None


def setup_from(args: argparse.Namespace) -> harness.Setup:
    kernels.reset_counts()  # the counters the gate reports are its own run's
    prompts = [parse_ids(t) for t in args.prompt_ids]
    if prompts and args.prompt_lens:
        raise ValueError("--prompt-lens sets the seeded prompts; with --prompt-ids there are none")
    if not prompts:
        lens = args.prompt_lens or args.default_lens
        prompts = default_prompts(load_config(args.model).vocab_size, args.seed, lens)
    if args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens {args.max_new_tokens}: must be at least 1")
    return harness.Setup(
        args.model,
        prompts,
        args.max_new_tokens,
        resolve_dtype(args.dtype or "auto", load_config(args.model)),
        args.device,
        oracle_dir=args.oracle_model,
    )


def razor_dtypes(args: argparse.Namespace) -> list[str]:
    """`--dtype` if given; else the checkpoint's dtype and bfloat16 (fp32 hides every bf16 rounding point)."""
    if args.dtype is not None:
        return [resolve_dtype(args.dtype, load_config(args.model))]
    return list(dict.fromkeys([checkpoint_dtype(load_config(args.model)), "bfloat16"]))


def report(
    result: GateResult,
    as_json: bool,
    columns: list[str] | None = None,
    require: list[str] | None = None,
    peers: list[str] | None = None,
    razor: str | None = None,
) -> int:
    """Print the verdict and the kernel arms that ran (engine/kernels/table.py's counters); a flag in `require`
    whose arms never ran fails the gate, whatever its verdict, and so does a peer in `peers` (`--attn-peer`)
    that ran 0 times. A flag none of whose ops the model calls (a dense-MLP arm on an MoE model) is not
    applicable there: reported, and left to the models that do."""
    seen = kernels.counts()
    required = require or []
    ops_of = {f: kernels.ops_gated_by(f) for f in required}  # empty for a flag that gates no arm: it fails
    not_applicable = [f for f in required if ops_of[f] and kernels.op_calls(ops_of[f], seen) == 0]
    missing = [f for f in required if f not in not_applicable and kernels.arms_ran(f, seen) == 0]
    idle = [p for p in peers or [] if p != peer_attention.ENGINE and peer_attention.calls(p, seen) == 0]
    if as_json:
        out = result.to_json()
        out["arms"] = {f"{op}/{arm}": n for (op, arm), n in sorted(seen.ran.items())}
        out["fallbacks"] = {f"{op}/{arm}: {needs}": n for (op, arm, needs), n in sorted(seen.fallbacks.items())}
        out["declines"] = {f"{op}/{arm}: {why}": n for (op, arm, why), n in sorted(seen.declines.items())}
        out["arms_missing"] = missing
        out["arms_not_applicable"] = not_applicable
        out["peers_idle"] = idle
        if razor is not None:
            out["razor"] = razor
        print(json.dumps(out))
    else:
        table, _, verdict = result.render(columns).rpartition("\n")
        for block in (table, kernels.render_counts(seen)):
            if block:
                print(block)
        for flag in not_applicable:
            ops = ", ".join(sorted(ops_of[flag]))
            print(f"n/a: {flag}: this model never calls its ops ({ops}); another model must run its arm")
        for flag in missing:
            print(f"FAIL: no arm gated by {flag} ran (0 calls): the gate did not exercise the arm under test")
        for name in idle:
            print(
                f"FAIL: --attn-peer {name} ran 0 times ({peer_attention.OP}/{peer_attention.PEERS[name].arm}): "
                "the gate judged no output of the peer"
            )
        print(verdict)  # the verdict stays the last line
    return 0 if result.passed and not missing and not idle else 1


# (setup, oracle, our ids, the engine's top log-probs on them or None) -> verdict
Gate = Callable[[harness.Setup, Oracle, list[list[int]], harness.EngineLogprobs | None, float | None], GateResult]


def cmd_tokens(args: argparse.Namespace) -> int:
    setup = setup_from(args)
    return run_peers(args, setup, [setup.dtype], lambda s, oracle, ours, _tops, _limit: harness.tokens(s, oracle, ours))


def beside_peers(result: GateResult, peer: str, measured: list[tuple[str, int]]) -> GateResult:
    """`--divergence-beside-peers`: each run's diverging prompts counted (a production peer's kept in `measured`),
    none judged on them; the engine's summary names the peers' counts beside its own."""
    bad = diverged(result)
    if peer != peer_attention.ENGINE:
        measured.append((peer, bad))
        return GateResult(result.gate, PASS, f"{result.summary} (measured, not judged)", result.table, result.details)
    if not measured:
        return GateResult(result.gate, FAIL, f"{result.summary}; no production peer ran beside it", result.table)
    peers = ", ".join(f"{p} {n}" for p, n in measured)
    summary = f"{result.summary} (measured, not judged); the production kernels' diverging prompts: {peers}"
    return GateResult(result.gate, PASS, summary, result.table, {**result.details, "beside_peers": dict(measured)})


def cmd_neartie(args: argparse.Namespace) -> int:
    if args.served or args.outputs:
        return cmd_neartie_served(args)
    setup = setup_from(args)  # resets the counters: they cover every dtype's and every peer's run
    args.razor = pick_razor(args, setup.flags or FlagSnapshot.from_env())  # said once the runs are planned

    twins: dict[str, Oracle] = {}  # --fp32-arbiter: the oracle's fp32 twin per dtype, loaded once

    def gate(
        s: harness.Setup,
        oracle: Oracle,
        ours: list[list[int]],
        tops: harness.EngineLogprobs | None,
        limit: float | None,
    ) -> GateResult:
        twin = None
        if args.fp32_arbiter and s.dtype != "float32":
            if s.dtype not in twins:
                twins[s.dtype] = harness.fp32_twin(s.oracle_dir or s.model_dir, harness.DTYPES[s.dtype], s.device)
            twin = twins[s.dtype]
        result = harness.neartie(
            s,
            args.band,
            args.top_k,
            ours=ours,
            oracle=oracle,
            max_near_tie_rate=args.max_near_tie_rate,
            arbiter=twin,
            max_out_of_band_rate=args.max_out_of_band_rate,
            engine_logprobs=tops,
            max_logprob_dist=limit,
        )
        razor: kernels.Razor | None = getattr(args, "razor_setting", None)
        if razor is not None and razor.logprob_limit(s.dtype) is not None and s.oracle_attn != razor.oracle_attn:
            result.summary += (
                f"; log-prob rule not applied: its limit is measured against the {razor.oracle_attn} oracle"
            )
        return result

    return run_peers(args, setup, razor_dtypes(args), gate)


def cmd_neartie_served(args: argparse.Namespace) -> int:
    """The razor on a server's outputs (lab/gates/served.py): the fp32 oracle teacher-forced on its tokens."""
    from lab.gates import served  # why: urllib and the served format only for this mode

    if args.served and args.outputs:
        raise ValueError("--served and --outputs: judge one source at a time")
    if args.outputs:
        runs = served.load_outputs(args.outputs)
    else:
        setup = setup_from(args)
        runs = served.fetch(args.served, setup.prompts, args.max_new_tokens, max(args.top_k, 1))
        if args.save_outputs:
            served.save_outputs(args.save_outputs, runs)
    # the oracle in --dtype when given (a bf16 server judged by a bf16 oracle rounds where it rounds), else fp32
    dtype = DTYPES[resolve_dtype(args.dtype, load_config(args.model))] if args.dtype else torch.float32
    oracle = Oracle(args.oracle_model or args.model, dtype, args.device, (args.oracle_attn or ["eager"])[0])
    logprobs = [oracle.teacher_forced_logprobs(r.prompt, r.tokens) for r in runs]
    rate = DEFAULT_MAX_NEAR_TIE_RATE if args.max_near_tie_rate is None else args.max_near_tie_rate
    result = served.served_gate(runs, logprobs, args.band, args.top_k, rate, args.logprob_tol)
    if args.json:
        print(json.dumps(result.to_json()))
    else:
        print(f"{result.gate}: {result.verdict}: {result.summary}")
    return 0 if result.passed else 1


def peer_limit(margin: float, floor: float, measured: list[tuple[str, float]]) -> tuple[float, str]:
    """The log-prob limit `--logprob-limit-from-peers` sets for the engine: `margin` times the largest distance the
    production peers measured on the same model, dtype and oracle, never below the setting's own `floor`; and how it
    was set, in words. Without a measured peer the floor stands."""
    if not measured:
        return floor, f"the setting's {floor:g}: no production peer measured it"
    peer, worst = max(measured, key=lambda m: m[1])
    limit = max(floor, margin * worst)
    return limit, f"{limit:.3g} = max({floor:g}, {margin:g} x {worst:.3g}, {peer}'s distance)"


def peers_first(args: argparse.Namespace, peers: list[str]) -> list[str]:
    """The peers in run order: with --logprob-limit-from-peers or --divergence-beside-peers the production peers
    before the engine, whose limit (or comparison) their runs set (either option needs both)."""
    margin = getattr(args, "logprob_limit_from_peers", None)
    if margin is None and not getattr(args, "divergence_beside_peers", False):
        return peers
    option = "--divergence-beside-peers" if margin is None else "--logprob-limit-from-peers"
    if margin is not None and margin < 1:
        raise ValueError(f"{option} {margin:g}: the margin must be at least 1")
    production = [p for p in peers if p != peer_attention.ENGINE]
    if peer_attention.ENGINE not in peers or not production:
        raise ValueError(f"{option}: needs --attn-peer engine and at least one production peer")
    if margin is not None and not getattr(getattr(args, "razor_setting", None), "max_logprob_dist", ()):
        raise ValueError(f"{option}: the razor setting has no log-prob rule (--razor-setting)")
    return [*production, peer_attention.ENGINE]


def run_peers(args: argparse.Namespace, setup: harness.Setup, dtypes: list[str], gate: Gate) -> int:
    """`gate` once per (--attn-peer, dtype, --oracle-attn), each judged on its own: our ids generated once per
    (peer, dtype), each oracle loaded once per dtype; one line per run when a peer or an oracle is named, one ledger
    record per run with --ledger; then the report of them all."""
    peers = peers_first(args, list(dict.fromkeys(args.attn_peer)) or [peer_attention.ENGINE])
    margin = getattr(args, "logprob_limit_from_peers", None)
    measured: dict[tuple[str, str], list[tuple[str, float]]] = {}  # (dtype, oracle) -> the peers' distances
    diverged: dict[tuple[str, str], list[tuple[str, int]]] = {}  # (dtype, oracle) -> the peers' diverging prompts
    attns = list(dict.fromkeys(args.oracle_attn)) or ["eager"]
    config = load_config(args.model)
    plan = []
    for peer in peers:
        why = {dt: peer_attention.refusal(peer, config, DTYPES[dt], args.device) for dt in dtypes}
        if all(why.values()):  # nothing this peer can run: a usage error, named
            raise ValueError(next(iter(why.values())))
        for dt, reason in why.items():
            if reason:
                print(f"{args.gate}: {peer} skips {dt}: {reason}", file=sys.stderr)
            else:
                plan.append((peer, dt))
    if args.razor is not None:
        print(f"razor: {args.razor}", file=sys.stderr)
    plain = peers == [peer_attention.ENGINE] and attns == ["eager"]  # the gate as it always ran: no run lines
    base, oracles, results = setup.flags, {}, {}
    base_env = FlagSnapshot.from_env()
    for peer, dt in plan:
        setup.dtype = dt
        setup.flags = base if peer == peer_attention.ENGINE else peer_attention.flags(peer, base_env)
        before, t0 = kernels.counts(), time.perf_counter()
        # the rule needs our log-probs; so may a run that takes an arm of another setting (`razor_of_run`)
        may_switch = getattr(args, "razor_from_arms", False) and bool(kernels.razors_enabled(setup.flags or base_env))
        wants = may_switch or any(logprob_limit(args, dt, attn) is not None for attn in attns)
        with peer_attention.injected(peer, setup.device):
            ours, tops = setup.ours_with_logprobs() if wants else (setup.ours(), None)
        ran, seconds = kernels.counts().ran - before.ran, time.perf_counter() - t0
        # what took the decode attention: the peer's calls, or the engine's arms (a graph replay is not counted)
        took = ", ".join(f"{arm} {n}" for (op, arm), n in sorted(ran.items()) if op == peer_attention.OP)
        if peer in peer_attention.PEERS:
            took = f"peer calls {ran[(peer_attention.OP, peer_attention.PEERS[peer].arm)]}"
        run_attns = attns
        was = getattr(args, "razor_setting", None)
        if peer != peer_attention.ENGINE and getattr(args, "razor_from_arms", False):
            apply_razor(args, kernels.EAGER_RAZOR)  # a peer is judged as given, whatever the engine's run took
        if peer == peer_attention.ENGINE and (picked := razor_of_run(args, ran)) is not None:
            run_attns = list(args.oracle_attn)
            if args.razor_setting != was:  # said when the setting changes, not on every run
                args.razor = picked
                print(f"razor for the {dt} run: {picked}", file=sys.stderr)
        for attn in run_attns:
            if (dt, attn) not in oracles:
                setup.oracle_attn = attn
                oracles[dt, attn] = setup.oracle()
            setup.oracle_attn = attn
            limit, how = logprob_limit(args, dt, attn), ""
            if margin is not None and limit is not None:
                if peer == peer_attention.ENGINE:
                    limit, how = peer_limit(margin, limit, measured.get((dt, attn), []))
                else:
                    limit = None  # a production peer: its distance is measured, and it sets the engine's limit
            result = gate(setup, oracles[dt, attn], ours, tops, limit)
            if getattr(args, "divergence_beside_peers", False):
                result = beside_peers(result, peer, diverged.setdefault((dt, attn), []))
            if how:
                result.details["logprob_limit_from"] = how
                result.summary += f"; the limit {how}"
            dist = result.details.get("logprob_dist")
            if margin is not None and peer != peer_attention.ENGINE and dist is not None:
                measured.setdefault((dt, attn), []).append((peer, dist["mean"]))
            run = f"{peer} {dt}" + ("" if attn == "eager" else f" oracle-{attn}")
            results[dt if plain else run.replace(" ", "/")] = result
            if not plain:
                print(
                    f"run {run}: {result.verdict}: {result.summary} [{took or 'no decode attention call'}; {seconds:.1f} s]",
                    file=sys.stderr if args.json else sys.stdout,  # --json: stdout is the one JSON object
                )
            if args.ledger:
                record = write_run_record(args, setup, peer, attn, result, ran)
                print(f"ledger: {record}", file=sys.stderr)
    key = "dtype" if plain else "peer/dtype/oracle"
    return report(harness.per_dtype(results, key), args.json, require=args.require_arm, peers=peers, razor=args.razor)


def rows_of(args: argparse.Namespace, peer: str) -> list[str]:
    """The rows a run's record evidences: the gate's own, a peer's performance row, then those --row names."""
    own = ["ENGINE-GATES"] if peer == peer_attention.ENGINE else ["ENGINE-GATES", "ENGINE-PERF"]
    return own + [r for r in dict.fromkeys(args.row) if r not in own]


def write_run_record(
    args: argparse.Namespace,
    setup: harness.Setup,
    peer: str,
    attn: str,
    result: GateResult,
    ran: Counter[tuple[str, str]],
) -> Path:
    """One run's ledger record: the verdict, its counts and the arms it ran (a peer that ran 0 times: FAIL)."""
    idle = peer != peer_attention.ENGINE and ran[(peer_attention.OP, peer_attention.PEERS[peer].arm)] == 0
    verdict = "FAIL" if idle else result.verdict
    model = Path(args.model).name
    command = "python -m lab " + shlex.join(sys.argv[1:]) if sys.argv[1:] else f"python -m lab gate {args.gate}"
    oracle = "" if attn == "eager" else f"-oracle-{attn}"
    return write_record(
        args.ledger,
        f"{args.gate}-{model}-{peer}-{setup.dtype}{oracle}",
        rows_of(args, peer),
        command,
        harness.device_name(setup.device),
        f"{args.gate} on {model} ({setup.dtype}, decode attention: {peer}, oracle attention: {attn}): {verdict}: "
        f"{result.summary}",
        {
            "model": str(args.model),
            "dtype": setup.dtype,
            "attn_peer": peer,
            "oracle_attn": attn,
            "verdict": verdict,
            "peer_idle": idle,
            "razor": args.razor,
            "summary": result.summary,
            "details": result.details,
            "arms": {f"{op}/{arm}": n for (op, arm), n in sorted(ran.items())},
        },
        flags=setup.flags,
        selftest=harness.selftest_counts(result),
        allow_dirty=getattr(args, "allow_dirty", False),
    )


def cmd_distributional(args: argparse.Namespace) -> int:
    if args.runs < 2:
        raise ValueError(f"--runs {args.runs}: determinism needs at least 2 runs")
    return report(harness.distributional(setup_from(args), args.runs), args.json, require=args.require_arm)


def cmd_goldens(args: argparse.Namespace) -> int:
    kernels.reset_counts()
    paths = args.golden or sorted(GOLDENS_DIR.glob("*.json"))
    if not paths:
        print(f"error: no golden files in {GOLDENS_DIR}", file=sys.stderr)
        return 1
    worst, checked = 0, 0
    for path in paths:
        if json.loads(Path(path).read_text()).get("device") == "cuda" and not torch.cuda.is_available():
            print(f"goldens: SKIP: {Path(path).name}: recorded on a CUDA device; none here")
            continue
        worst = max(worst, report(harness.check_golden(path), args.json))
        checked += 1
    if not checked:  # a gate that examined nothing has not passed
        print("error: every golden was skipped; none was checked", file=sys.stderr)
        return 1
    return worst


def cmd_regen(args: argparse.Namespace) -> int:
    setup = setup_from(args)
    name = "tiny-qwen3" if Path(args.model).resolve() == harness.TINY_MODEL else str(args.model)
    command = "python -m lab " + shlex.join(sys.argv[1:]) if sys.argv[1:] else "python -m lab gate regen"
    rate = DEFAULT_MAX_NEAR_TIE_RATE if args.max_near_tie_rate is None else args.max_near_tie_rate
    result, record = harness.regen(
        args.golden, setup, name, args.band, args.top_k, args.ledger_dir, command, rate, args.allow_dirty
    )
    code = report(result, args.json, require=args.require_arm)
    if record is None:
        print(f"regen refused: {args.golden} left unchanged (the near-tie gate failed)", file=sys.stderr)
    else:
        print(f"wrote {args.golden}; ledger record {record}", file=sys.stderr)
    return code
