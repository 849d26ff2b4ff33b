"""`python -m lab ci [PHASE ...]`: the GPU job as a table of phases, each verdict read from what its steps write.

A phase is a list of steps (name, time limit, argv, env) within a time budget, run in order, one at a time or a
few side by side (the gates of tiny models), a barrier step (the build, a model maker) alone. Each step runs as its
own process group with its own limit (clipped to what is left of the phase's budget), logs to $OUT/logs/NAME.log, and
its verdict comes from the JSON or the ledger record its command writes: a gate's `--json` object, pytest's
JUnit XML, a kernels or benchmark ledger record, reach.json, Nsight Compute's raw CSV page. A step whose JSON is
missing examined nothing: it fails. A compact verdict table is printed last and written to
$OUT/ci-verdicts.json; $OUT/ledger.tgz holds the ledger records, logs and results.

Phases: gates (the CUDA build, the runner's GPU tests, the token and near-tie gates, memcheck), bench (the
bandwidth and A/B benchmarks, the decode step), serve (engine.LLM's GPU tests, the throughput benchmark),
reach (every attention arm reached by a gate model), flip (the flip protocol, AGENTS.md: FLIP="VT_X=1 ..."),
ncu (Nsight Compute's limiter table) and calib (the near-tie razor on production kernels: FlashInfer, cuDNN).
The one-off phases of finished rows left with ci/gpu.sh; docs/CI.md says where their commands are.

Ledger records name the commit they measured and refuse a tree that differs from it. On a copy of the tree
without .git (a device machine), write the manifest in the clean checkout first and carry it:
`python -m lab.gates.ledger manifest` (.tree-manifest.json, git-ignored).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
POLL = 0.2  # seconds between looks at the running steps
MIN_LEFT = 10  # seconds: a step with less of its phase's budget left is not started (it would measure nothing)
DEFAULT_PHASES = ("gates", "bench")
FLIP_MODELS = ("dense", "d128", "moe", "d128-g4", "long")
ON = ("1", "true", "on", "yes")
# Flags that are correct but not byte-exact and still OFF: the near-tie razor holds them to the oracle. (The split-KV
# arms are by name only since the retire rule: `lab bench ab --arm`, `lab gate reach`.)
FAST = {"VT_MOE_KERNELS": "1"}


@dataclass(frozen=True)
class Verdict:
    status: str  # pass, fail or skip (a skip carries its reason: n/a, no ncu, ...)
    detail: str

    @property
    def ok(self) -> bool:
        return self.status != "fail"


@dataclass(frozen=True)
class Finished:
    """What a reader gets: how the step ended and what was in its ledger directory before it ran."""

    rc: int
    log: Path
    ledger_before: frozenset[str]


Reader = Callable[[Finished], Verdict]


@dataclass(frozen=True)
class Step:
    name: str
    limit: int  # seconds
    argv: tuple[str, ...]
    reader: Reader
    env: Mapping[str, str] = field(default_factory=dict)
    stdout: Path | None = None  # where stdout goes when it is the result (a gate's --json); else the log
    barrier: bool = False  # runs alone, after every step before it (what later steps load: the build, models)


@dataclass(frozen=True)
class Phase:
    name: str
    budget: int  # seconds for all its steps
    what: str
    steps: Callable[[Context], list[Step]]
    derive: Callable[[Context], list[tuple[str, Verdict]]] | None = None  # verdicts judged across steps
    needs: str | None = None  # a program that must be on PATH, else the phase is skipped with the reason
    jobs: int = 1  # steps at once: gates on tiny models share the GPU; benchmarks and profiles never do


@dataclass(frozen=True)
class Flip:
    """The flip protocol's settings, validated (`parse_flip`)."""

    settings: tuple[tuple[str, str], ...]
    models: tuple[str, ...]
    filters: tuple[str, ...] = ()
    prompt_lens: str | None = None

    @property
    def env(self) -> dict[str, str]:
        return dict(self.settings)

    @property
    def on(self) -> list[str]:
        return [k for k, v in self.settings if v.lower() in ON]


@dataclass(frozen=True)
class Context:
    out: Path
    flip: Flip | None = None
    calib_razor: str = "eager"  # the razor setting calib judges production kernels by (engine/kernels RAZORS)

    @property
    def ledger(self) -> Path:
        return self.out / "ledger"

    @property
    def models(self) -> Path:
        return self.out / "models"

    def result(self, name: str, suffix: str = ".json") -> Path:
        return self.out / "results" / f"{name}{suffix}"


# --- readers: each turns what a step wrote into a verdict; no JSON means the step examined nothing ---------------


def _load(path: Path) -> Any:
    """The JSON object in `path` (a gate's --json stdout: its last line), or None."""
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return None
    for text in (("\n".join(lines)), lines[-1] if lines else ""):
        try:
            data = json.loads(text)
        except ValueError:
            continue
        if isinstance(data, dict):
            return data
    return None


def _nothing(path: Path, f: Finished) -> Verdict:
    return Verdict("fail", f"examined nothing: no JSON at {path.name} (exit {f.rc}; {f.log.name})")


def gate_json(path: Path, refusal_is_na: bool = False) -> Reader:
    """A gate's `--json` object (lab/gates/cli.py report): its verdict, the arms it required and the peers idle."""

    def read(f: Finished) -> Verdict:
        data = _load(path)
        if data is None or "verdict" not in data:
            return _nothing(path, f)
        detail = f"{data.get('gate', 'gate')}: {data['verdict']}: {data.get('summary', '')}"
        if data["verdict"] == "REFUSED" and refusal_is_na:
            return Verdict("skip", f"n/a: {detail}")
        missing, idle = data.get("arms_missing") or [], data.get("peers_idle") or []
        detail += "".join(f"; no arm gated by {m} ran" for m in missing)
        detail += "".join(f"; peer {p} ran 0 times" for p in idle)
        detail += "".join(f"; n/a here: {n}" for n in data.get("arms_not_applicable") or [])
        passed = data["verdict"] == "PASS" and not missing and not idle and f.rc == 0
        return Verdict("pass" if passed else "fail", detail)

    return read


def report_json(path: Path) -> Reader:
    """A report of the shape {"passed", "examined", "summary"} (the CUDA build, reach.json, the FlashInfer warm-up)."""

    def read(f: Finished) -> Verdict:
        data = _load(path)
        if data is None or "passed" not in data:
            return _nothing(path, f)
        examined = int(data.get("examined") or 0)
        detail = str(data.get("summary", ""))
        if examined == 0:
            return Verdict("fail", f"examined nothing: {detail}")
        return Verdict("pass" if data["passed"] is True and f.rc == 0 else "fail", detail)

    return read


def junit(path: Path) -> Reader:
    """pytest's --junitxml: the tests that ran (not skipped), their failures and errors."""

    def read(f: Finished) -> Verdict:
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError):
            return Verdict("fail", f"examined nothing: no JUnit XML at {path.name} (exit {f.rc}; {f.log.name})")
        suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
        count = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
        ran = count["tests"] - count["skipped"]
        bad = count["failures"] + count["errors"]
        detail = f"{ran - bad} passed, {count['failures']} failed, {count['errors']} errors, {count['skipped']} skipped"
        if ran == 0:
            return Verdict("fail", f"examined nothing: {detail}")
        return Verdict("pass" if bad == 0 and f.rc == 0 else "fail", detail)

    return read


def kernels_record(path: Path) -> Reader:
    """`gate kernels --ledger PATH`'s record: every case within tolerance and the comparator's self-test caught all."""

    def read(f: Finished) -> Verdict:
        data = _load(path)
        if data is None:
            return _nothing(path, f)
        figures = {fig["name"]: fig["value"] for fig in data.get("figures", [])}
        cases, within = int(figures.get("cases", 0)), int(figures.get("cases_within_tolerance", 0))
        selftest = data.get("comparator_selftest") or {}
        if cases == 0:
            return Verdict("fail", f"examined nothing: {data.get('summary', '0 cases')}")
        caught = selftest.get("caught") == selftest.get("seeded")
        passed = within == cases and caught and f.rc == 0
        return Verdict("pass" if passed else "fail", str(data.get("summary", "")))

    return read


def ledger_records(directory: Path) -> Reader:
    """A benchmark's `--ledger DIR`: the records it added there (a benchmark that wrote none measured nothing)."""

    def read(f: Finished) -> Verdict:
        new = sorted(p for p in directory.glob("*.json") if p.name not in f.ledger_before)
        if not new:
            return Verdict("fail", f"examined nothing: no new ledger record in {directory.name}/ (exit {f.rc})")
        first = _load(new[0]) or {}
        detail = f"{len(new)} record(s), {new[0].name}: {str(first.get('summary', ''))[:120]}"
        return Verdict("pass" if f.rc == 0 else "fail", detail)

    return read


def generated(path: Path, sanitizer_log: Path) -> Reader:
    """`engine generate --json` under compute-sanitizer (--error-exitcode 9): tokens out and no memcheck error."""

    def read(f: Finished) -> Verdict:
        if f.rc == 9:
            return Verdict("fail", f"memcheck reported errors ({sanitizer_log.name})")
        data = _load(path)
        if data is None or "tokens" not in data:
            return _nothing(path, f)
        tokens = sum(len(t) for t in data["tokens"])
        if tokens == 0:
            return Verdict("fail", "examined nothing: 0 tokens generated")
        return Verdict("pass" if f.rc == 0 else "fail", f"{tokens} tokens, memcheck exit {f.rc}")

    return read


def wrote(*paths: Path) -> Reader:
    """A setup step (a model maker): it exited 0 and wrote what the later steps load."""

    def read(f: Finished) -> Verdict:
        absent = [p for p in paths if not p.exists()]
        if absent:
            return Verdict("fail", f"examined nothing: {', '.join(map(str, absent))} not written (exit {f.rc})")
        return Verdict("pass" if f.rc == 0 else "fail", f"wrote {len(paths)} file(s), exit {f.rc}")

    return read


def ncu_page(log: Path) -> Reader:
    """Nsight Compute's raw CSV page in the step's output (lab/bench/ncu_table.py parses it): kernels profiled."""

    def read(f: Finished) -> Verdict:
        from lab.bench.ncu_table import NcuError, parse_log  # why: only the ncu phase needs it

        try:
            kernels = parse_log(log.read_text(errors="replace"), str(log))
        except (OSError, NcuError) as exc:
            return Verdict("fail", f"examined nothing: {str(exc)[:160]}")
        return Verdict("pass" if f.rc == 0 else "fail", f"{len(kernels)} kernel(s) profiled")

    return read


# --- steps ----------------------------------------------------------------------------------------------------------


def build_step(ctx: Context, limit: int = 240) -> Step:
    """The CUDA build, run once per invocation (a later phase reuses its verdict)."""
    report = ctx.result("build")
    argv = (PY, "-m", "engine.cuda.build", "--json", str(report))
    return Step("build", limit, argv, report_json(report), barrier=True)


def gate(
    ctx: Context,
    name: str,
    limit: int,
    args: Sequence[str],
    env: Mapping[str, str] | None = None,
    refusal_is_na: bool = False,
) -> Step:
    """`python -m lab gate ARGS --json`: its JSON object is its stdout."""
    out = ctx.result(name)
    argv = (PY, "-m", "lab", "gate", *args, "--json")
    return Step(name, limit, argv, gate_json(out, refusal_is_na), dict(env or {}), stdout=out)


def pytest_step(ctx: Context, name: str, limit: int, tests: Sequence[str], *extra: str) -> Step:
    xml = ctx.result(name, ".xml")
    argv = (PY, "-m", "pytest", *tests, *"-m gpu -q -rs -p no:cacheprovider --junitxml".split(), str(xml), *extra)
    return Step(name, limit, argv, junit(xml))


def bench(ctx: Context, name: str, limit: int, args: Sequence[str], env: Mapping[str, str] | None = None) -> Step:
    argv = (PY, "-m", "lab", "bench", *args, "--ledger", str(ctx.ledger))
    return Step(name, limit, argv, ledger_records(ctx.ledger), dict(env or {}))


def kernels(ctx: Context, name: str, limit: int, filters: Sequence[str], env: Mapping[str, str] | None = None) -> Step:
    record = ctx.ledger / f"{name}.json"
    argv = (PY, "-m", "lab", "gate", "kernels", *(a for f in filters for a in ("--filter", f)), "--ledger", str(record))
    return Step(name, limit, argv, kernels_record(record), dict(env or {}))


def memcheck(ctx: Context, name: str, limit: int, args: Sequence[str], env: Mapping[str, str] | None = None) -> Step:
    out, log = ctx.result(name), ctx.out / "logs" / f"{name}.sanitizer.log"
    sanitizer = "compute-sanitizer --tool memcheck --error-exitcode 9 --log-file".split()
    argv = (*sanitizer, str(log), PY, *"-m engine generate --device cuda".split(), *args, "--json")
    return Step(name, limit, argv, generated(out, log), dict(env or {}), stdout=out)


def make_models(ctx: Context, name: str, limit: int, tiny: Sequence[str] = (), gates: Sequence[str] = ()) -> Step:
    """Write the tiny models (moe, d128) and the gate models (lab/data/gate_models.py) under $OUT/models."""
    code = "import sys, lab.ci; lab.ci.write_models(*sys.argv[1:])"
    argv = (PY, "-c", code, str(ctx.models), " ".join(tiny), " ".join(gates))
    return Step(name, limit, argv, wrote(*(ctx.models / n / "config.json" for n in (*tiny, *gates))), barrier=True)


def write_models(root: str, tiny: str, gates: str) -> None:
    """The makers behind `make_models` (run in the step's own process: they load transformers)."""
    from lab.data.gate_models import write_gate_models  # why: the makers load transformers
    from lab.data.make_tiny import build, build_moe  # why: as above

    makers = {"moe": build_moe, "d128": lambda: build(head_dim=128)}
    for name in tiny.split():
        makers[name]().save_pretrained(Path(root) / name)
    if gates.split():
        write_gate_models(Path(root), gates.split())


def long_prompt_lens() -> str:
    """The long gate model's own prompt lengths (1500+ tokens: the tiled arms' several KV splits)."""
    from lab.data.gate_models import GATE_MODELS  # why: it loads the model makers

    return ",".join(map(str, GATE_MODELS["long"].prompt_lens))


# --- phases ---------------------------------------------------------------------------------------------------------


def gates_steps(ctx: Context) -> list[Step]:
    moe, d128 = str(ctx.models / "moe"), str(ctx.models / "d128")
    g = ("--device", "cuda", "--dtype", "bfloat16")
    return [
        build_step(ctx),
        make_models(ctx, "make-models", 60, tiny=("moe", "d128")),
        gate(ctx, "tokens-dense-graph", 60, ("tokens", *g)),
        gate(ctx, "tokens-dense-eager", 60, ("tokens", *g), {"VT_EAGER": "1"}),
        gate(ctx, "tokens-moe", 60, ("tokens", *g, "--model", moe)),
        gate(ctx, "tokens-moe-kernels", 60, ("tokens", *g, "--model", moe), {"VT_MOE_KERNELS": "1"}),
        gate(ctx, "neartie-dense-fast", 90, ("neartie", *g), FAST),
        gate(ctx, "neartie-moe-fast", 90, ("neartie", *g, "--model", moe), FAST),
        # head_dim 32 takes the generic attention arm; the head_dim-128 model runs the default tiled arm
        # 336-position contexts: a position out of band is judged again by the oracle's fp32 twin (as in the flip)
        gate(ctx, "neartie-d128", 120, ("neartie", *g, "--model", d128, "--max-new-tokens", "300", "--fp32-arbiter")),
        memcheck(ctx, "memcheck-dense", 150, ("--dtype", "bfloat16", "--max-new-tokens", "4")),
        memcheck(
            ctx,
            "memcheck-moe",
            150,
            ("--dtype", "bfloat16", "--max-new-tokens", "4", "--model", moe),
            {"VT_MOE_KERNELS": "1"},
        ),
        pytest_step(
            ctx,
            "runner-gpu-tests",
            120,
            (
                "tests/engine/test_runner.py",
                "tests/engine/test_graph_splitkv.py",
                "tests/engine/test_moe_decode_capture.py",
                "tests/lab/bench/test_decode_profile.py",
            ),
        ),
    ]


def bench_steps(ctx: Context) -> list[Step]:
    steps = [
        bench(
            ctx,
            "bw-attn-b64",
            150,
            (
                "bandwidth",
                "--workload",
                "attn-decode",
                "--sweep",
                "ctx=1024,4096,16384",
                "--plot",
                str(ctx.out / "attn-bandwidth.png"),
            ),
        ),
        bench(ctx, "bw-attn-b1-32k", 90, ("bandwidth", "--workload", "attn-decode", "--shape", "batch=1,ctx=32768")),
        bench(ctx, "bw-attn-d256", 90, ("bandwidth", "--workload", "attn-decode", "--shape", "hq=16,hkv=2,d=256")),
    ]
    for shape in ("n=4096,k=4096", "n=14336,k=4096", "n=4096,k=14336"):
        steps.append(bench(ctx, f"bw-gemv-{shape}", 60, ("bandwidth", "--workload", "gemv", "--shape", shape)))
    steps += [
        bench(  # a by-name arm against the default order
            ctx,
            "ab-splitkv-swap",
            90,
            ("ab", "--arm", "paged_decode_attention/splitkv_swap", "--shape", "batch=1,ctx=32768"),
        ),
        bench(ctx, "ab-gemv", 60, ("ab", "--flag", "VT_GEMV", "--shape", "n=4096,k=14336")),
        bench(ctx, "ab-tiled", 90, ("ab", "--flag", "VT_ATTN_TILED")),
        bench(ctx, "ab-norm", 60, ("ab", "--flag", "VT_NORM_KERNEL")),
    ]
    for q in ("awq-gemv", "gptq-gemv", "nvfp4-gemv"):  # dequant-GEMV against dequant-then-linear and F.linear
        steps.append(bench(ctx, f"bw-{q}", 60, ("bandwidth", "--workload", q)))
    steps += [
        bench(ctx, "decode-0.6b", 180, ("decode",)),
        bench(ctx, "decode-0.6b-profile", 180, ("decode", "--profile", "--no-oracle")),
    ]
    return steps


def serve_steps(ctx: Context) -> list[Step]:
    return [
        build_step(ctx),
        pytest_step(
            ctx,
            "serve-gpu-tests",
            300,
            ("tests/engine/test_llm.py", "tests/engine/test_sampler.py", "tests/engine/test_llm_qwen3_next.py"),
        ),
        bench(
            ctx,
            "serve-throughput",
            540,
            ("throughput", "--requests", "256", "--sweep", "64,256", "--plot", str(ctx.out / "throughput.svg")),
        ),
    ]


def reach_steps(ctx: Context) -> list[Step]:
    reach = (PY, *"-m lab gate reach --device cuda --dtype bfloat16".split())
    main = ctx.out / "reach"
    steps = [
        build_step(ctx),
        # the long gate model's decode shape first (lab/gates/cases/attention.py long_gate_cases)
        kernels(ctx, "reach-numerics", 120, ("long-gate",)),
        # the split count also forced to 1, 4 and 26 (reported, not judged)
        Step(
            "reach",
            300,
            (*reach, "--out", str(main), *"--time-limit 220 --tiled-splits 1 4 26".split()),
            report_json(main / "reach.json"),
        ),
    ]
    for seed in (1, 2, 3):  # more positions on `long`: the tiled arm, one split of it, the generic arm
        out = ctx.out / f"reach-seed{seed}"
        picked = "--models long --arms tiled generic --tiled-splits 1 --seed".split()
        argv = (*reach, *picked, str(seed), "--out", str(out))
        steps.append(Step(f"reach-long-seed{seed}", 90, argv, report_json(out / "reach.json")))
    return steps


def flip_model_args(ctx: Context, model: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(model options, razor-only options) of one flip model."""
    path = str(ctx.models / model)
    if model == "dense":
        return (), ()
    if model == "moe" or model == "d128-g4":
        return ("--model", path), ()
    if model == "d128":
        # 300 new tokens: 336 positions, so split-KV runs 2 splits and their combine; at those contexts the bf16
        # oracle's own rounding moves margins past the band, so its fp32 twin judges again
        return ("--model", path, "--max-new-tokens", "300"), ("--fp32-arbiter",)
    return ("--model", path, "--prompt-lens", long_prompt_lens()), ("--fp32-arbiter",)


def flip_steps(ctx: Context) -> list[Step]:
    flip = ctx.flip
    if flip is None:
        raise ValueError("flip: no FLIP settings")  # parse_flip ran before any phase: unreachable from the CLI
    env, g = flip.env, ("--device", "cuda", "--dtype", "bfloat16")
    req = tuple(a for f in flip.on for a in ("--require-arm", f))  # each flag set on must show an arm of its own
    tiny = tuple(m for m in ("moe", "d128") if m in flip.models)
    gate_models = tuple(m for m in ("d128-g4", "long") if m in flip.models)
    steps = [build_step(ctx), make_models(ctx, "flip-models", 120, tiny, gate_models)]
    # a razor setting's own arm under test (CALIB_ARM) is judged beside the production kernels it was calibrated on,
    # its log-prob limit CALIB_MARGIN times theirs, on the models their kernels take (CALIB_MODELS)
    calibrated, beside = calibrated_arm(flip), beside_peers(flip)
    if beside:
        jit = ctx.result("flip-jit")
        steps.append(Step("flip-jit", 120, (PY, "-c", CALIB_JIT, str(jit)), report_json(jit), barrier=True))
    steps.append(kernels(ctx, "flip-kernels", 300, flip.filters, env))
    for m in flip.models:
        margs, razor = flip_model_args(ctx, m)
        # FLIP_PROMPT_LENS: the razor's prompts (its 16 decode 16 rows at once, past the GEMV arms' 8); not long's
        lens = ("--prompt-lens", flip.prompt_lens) if flip.prompt_lens and m != "long" else ()
        razor_peers: tuple[str, ...] = ()
        token_peers: tuple[str, ...] = ()
        nenv, nlimit = env, 180
        if beside and m in CALIB_MODELS:  # three production runs more: d128's 4800 positions take 2-3 minutes
            peers = (*CALIB_PEER_ARGS, "--ledger", str(ctx.ledger))
            if calibrated:
                razor_peers = (*peers, "--logprob-limit-from-peers", str(CALIB_MARGIN))
            # a path that is not bitwise: its diverging prompts reported beside the production kernels' (correct
            # implementations diverge on 2-12 of 16, up to 5 apart: `lab gate spread`), its graphed ids held to its
            # eager ones (`flip_ran`)
            token_peers = (*peers, "--divergence-beside-peers")
            nenv, nlimit = {**env, **CALIB_ENV}, 300
        steps += [
            gate(ctx, f"flip-neartie-{m}", nlimit, ("neartie", *g, *margs, *lens, *razor, *razor_peers, *req), nenv),
            gate(ctx, f"flip-distributional-{m}", 240, ("distributional", *g, *margs), env, refusal_is_na=True),
            gate(ctx, f"flip-tokens-{m}-graph", nlimit, ("tokens", *g, *margs, *token_peers, *req), nenv),
            gate(
                ctx,
                f"flip-tokens-{m}-eager",
                nlimit,
                ("tokens", *g, *margs, *token_peers, *req),
                {**nenv, "VT_EAGER": "1"},
            ),
        ]
        if m == "d128":  # no gates phase gave this model a baseline: its gates with the flags unset
            nenv_off = CALIB_ENV if token_peers else {}
            steps += [
                gate(ctx, "flip-neartie-d128-noflags", 180, ("neartie", *g, *margs, *razor)),
                gate(ctx, "flip-tokens-d128-noflags", nlimit, ("tokens", *g, *margs, *token_peers), nenv_off),
            ]
    # the golden of the embedded model on the GPU, rewritten only if the near-tie gate passes
    golden = ctx.out / "goldens" / "tiny-qwen3-bfloat16-cuda.json"
    steps.append(
        gate(ctx, "flip-regen-dense", 180, ("regen", *g, "--golden", str(golden), "--ledger-dir", str(ctx.ledger)), env)
    )
    return steps


def flip_ran(ctx: Context) -> list[tuple[str, Verdict]]:
    """A flag not applicable on one model (no call of its ops there) must have run its arm on another."""
    assert ctx.flip is not None
    out = []
    for flag in ctx.flip.on:
        ran = []
        for m in ctx.flip.models:
            data = _load(ctx.result(f"flip-neartie-{m}"))
            if data is not None and flag not in (data.get("arms_not_applicable") or []) + (
                data.get("arms_missing") or []
            ):
                ran.append(m)
        verdict = (
            Verdict("pass", f"its arm ran on {', '.join(ran)}") if ran else Verdict("fail", "its arm ran on no model")
        )
        out.append((f"flip-ran-{flag}", verdict))
    if beside_peers(ctx.flip):
        out += [(f"flip-tokens-{m}-identity", same_ids(ctx, m)) for m in ctx.flip.models if m in CALIB_MODELS]
    return out


def calibrated_arm(flip: Flip) -> bool:
    """A flag set on is a razor setting's own arm (CALIB_ARM): its flip runs beside the production kernels."""
    return any(f in CALIB_ARM.values() for f in flip.on)


def beside_peers(flip: Flip) -> bool:
    """The calibrated models' token gates measure divergence beside the production kernels: for a razor setting's
    own arm under test, and for every flip while one is on by default (the default path itself is judged so)."""
    return calibrated_arm(flip) or default_calibrated()


def default_calibrated() -> bool:
    """A razor setting's own arm is on by default: every flip runs the default path's token gates beside the
    production kernels (the first VT_GEMM_SMALL flip failed d128's token gate with its flag off, as with it on)."""
    from engine.flags import FlagSnapshot  # why: lab.ci runs before the engine is needed; the flags module alone

    return any(FlagSnapshot.defaults().enabled(f) for f in CALIB_ARM.values())


def same_ids(ctx: Context, model: str) -> Verdict:
    """The engine's ids graphed equal its ids eager, prompt by prompt (the token gates' digests): an arm whose
    divergence from the oracle is measured, not judged, must still be one program under both."""
    rows = {}
    for mode in ("graph", "eager"):
        data = _load(ctx.result(f"flip-tokens-{model}-{mode}"))
        table = (data or {}).get("table") or []
        rows[mode] = [
            (r.get("prompt"), r.get("ours_digest"))
            for r in table
            if str(r.get("peer/dtype/oracle", "")).startswith("engine/")
        ]
        if not rows[mode] or any(d is None for _, d in rows[mode]):
            return Verdict("fail", f"no engine ids from the {mode} token gate to compare")
    differ = [p for (p, a), (_, b) in zip(rows["graph"], rows["eager"]) if a != b]
    if differ or len(rows["graph"]) != len(rows["eager"]):
        return Verdict("fail", f"graphed and eager ids differ on prompts {differ or 'count'}")
    return Verdict("pass", f"graphed and eager ids equal on {len(rows['graph'])} prompts")


# FlashInfer's bf16 head_dim-128 decode, with tensor cores or not, a window or not: four modules, compiled at once
# (more than a minute each on the H200); a model step that finds one unfinished resumes it (ninja keeps its work)
CALIB_JIT = """import json, subprocess, sys
WARM = '''import sys, torch
from lab.bench.attn_peers import FlashInferDecode
tc, window = sys.argv[1] == 'tc', (None if sys.argv[2] == 'none' else int(sys.argv[2]))
q = torch.randn(2, 8, 128, dtype=torch.bfloat16, device='cuda')
k = torch.randn(8, 16, 2, 128, dtype=torch.bfloat16, device='cuda')
table = torch.arange(8, dtype=torch.int32, device='cuda').view(2, 4)
lens = torch.tensor([50, 64], dtype=torch.int32, device='cuda')
FlashInferDecode(tc, q.device)(q, k, k, table, lens, 0.1, window)
torch.cuda.synchronize()'''
runs = [(tc, w) for tc in ('tc', 'decode') for w in ('none', '40')]
procs = [subprocess.Popen([sys.executable, '-c', WARM, tc, w]) for tc, w in runs]
ready = [f'{tc} window {w}' for (tc, w), p in zip(runs, procs) if p.wait() == 0]
summary = f'{len(ready)}/{len(runs)} FlashInfer modules ready: ' + ', '.join(ready)
open(sys.argv[1], 'w').write(json.dumps({'passed': len(ready) == len(runs), 'examined': len(runs), 'summary': summary}))
print(summary)
"""
CALIB_MODELS = ("d128-g4", "d128", "long")
CALIB_ORACLE = {"eager": "eager", "fp32-probs": "online"}  # each razor setting's oracle (kernels.RAZORS)
# A named setting's own arm, judged beside the production kernels: the engine's runs turn it on and require it, and
# their log-prob limit is CALIB_MARGIN times the largest production distance (`--logprob-limit-from-peers`). 1.15:
# on the first H100 calibration the peers spread 1.03-1.28x among themselves, and an arm that rounds P (the default
# arm) sat 1.34-1.36x past the largest; the margin is this phase's question, its records the answer.
CALIB_ARM = {"fp32-probs": "VT_ATTN_ONEPASS"}
CALIB_MARGIN = 1.15
CALIB_PEERS = ("engine", "sdpa-cudnn", "flashinfer-tc", "flashinfer")
CALIB_PEER_ARGS = tuple(a for p in CALIB_PEERS for a in ("--attn-peer", p))
# cuDNN's ragged path: one graph for every context length (else a new graph, hundreds of ms, per length)
CALIB_ENV = {"TORCH_CUDNN_SDPA_AVOID_RECOMPILE": "1"}


def calib_steps(ctx: Context) -> list[Step]:
    """The near-tie razor's calibration on production kernels: the bf16 razor at its defaults on the head_dim-128
    models, decode attention by each peer (`--attn-peer`), judged against the eager oracle and against
    transformers' SDPA (fp32 scores), one process per model, one ledger record per run."""
    jit = ctx.result("calib-jit")
    oracles = "--oracle-attn eager --oracle-attn sdpa".split()
    env = dict(CALIB_ENV)
    if ctx.calib_razor != "eager":  # a named setting, against its own oracle (the online one for fp32-probs)
        oracles = ["--razor-setting", ctx.calib_razor, "--oracle-attn", CALIB_ORACLE[ctx.calib_razor]]
        arm = CALIB_ARM[ctx.calib_razor]
        oracles += ["--require-arm", arm, "--logprob-limit-from-peers", str(CALIB_MARGIN)]
        env[arm] = "1"
    common = (
        "neartie",
        *"--device cuda --dtype bfloat16".split(),
        *CALIB_PEER_ARGS,
        *oracles,
        "--ledger",
        str(ctx.ledger),
    )
    steps = [
        build_step(ctx, 90),  # a bare H100's build of every source: 57 s
        make_models(ctx, "calib-make", 25, tiny=("d128",), gates=("d128-g4", "long")),
        Step("calib-jit", 120, (PY, "-c", CALIB_JIT, str(jit)), report_json(jit)),
    ]
    for m in CALIB_MODELS:
        lens = ("--prompt-lens", long_prompt_lens()) if m == "long" else ()  # not the short defaults
        # on an H100 with the one-pass arm beside the peers: long 91 s, d128 56 s, d128-g4 past 60 s
        limit = {"long": 95, "d128-g4": 90}.get(m, 60)
        steps.append(gate(ctx, f"calib-{m}", limit, (*common, "--model", str(ctx.models / m), *lens), env))
    return steps


# the sections that name a limiter, raw page, base units (ns, bytes); only the launcher's last call (NVTX `profile`)
NCU = tuple(
    "ncu --clock-control none --csv --page raw --print-units base --section SpeedOfLight --section Occupancy "
    "--section LaunchStats --section WarpStateStats -c 8 --nvtx --nvtx-include profile/".split()
)
# (name, workload, arm, shape): what issue #40's misses run at today's defaults. The one-pass attention arm at four
# of the six peer shapes (b1 short and long, b64, head_dim 256) and cuDNN beside it at b1 ctx1024; the b1 step's
# streamed GEMV at q/k/v and down; cuBLAS at the b32 step's 32 rows, the same two projections
NCU_RUNS = (
    ("ncu-attn-b64", "attn-decode", "tiled-onepass", "batch=64,ctx=4096,hq=32,hkv=8,d=128"),
    ("ncu-attn-b1-32k", "attn-decode", "tiled-onepass", "batch=1,ctx=32768,hq=32,hkv=8,d=128"),
    ("ncu-attn-b1-1k", "attn-decode", "tiled-onepass", "batch=1,ctx=1024,hq=16,hkv=8,d=128"),
    ("ncu-cudnn-b1-1k", "attn-decode", "sdpa-cudnn", "batch=1,ctx=1024,hq=16,hkv=8,d=128"),
    ("ncu-attn-d256", "attn-decode", "tiled-onepass", "batch=64,ctx=4096,hq=16,hkv=2,d=256"),
    ("ncu-gemv-qkv", "gemv", "gemv-stream", "n=4096,k=1024"),
    ("ncu-gemv-down", "gemv", "gemv-stream", "n=1024,k=3072"),
    ("ncu-gemv-head", "gemv", "gemv-stream", "n=151936,k=1024"),  # the lm_head: 311 MB, a quarter of the b1 floor
    ("ncu-gemm32-qkv", "gemm", "defaults", "rows=32,n=4096,k=1024"),
    ("ncu-gemm32-down", "gemm", "defaults", "rows=32,n=1024,k=3072"),
)


def ncu_steps(ctx: Context) -> list[Step]:
    """Nsight Compute on the last call of each `bench launch` (its NVTX range `profile`), then the limiter table
    (lab/bench/ncu_table.py: duration, DRAM %, occupancy and its limiter, registers, top stalls) and its record."""
    steps = [build_step(ctx)]
    logs = []
    for name, workload, arm, shape in NCU_RUNS:
        log = ctx.out / "logs" / f"{name}.log"
        logs.append(str(log))
        launch = (PY, *"-m lab bench launch --calls 2 --workload".split(), workload, "--arm", arm, "--shape", shape)
        argv = (*NCU, *launch)
        steps.append(Step(name, 60, argv, ncu_page(log)))
    md = str(ctx.out / "ncu-table.md")
    table = ("ncu_table", *logs, "--markdown", md, *"--slug ncu-limiters --command".split(), "python -m lab ci ncu")
    steps.append(bench(ctx, "ncu-table", 30, table))
    return steps


# The peers' caches, filled at once before anything is timed: FlashInfer's bf16 modules for the six peer shapes
# (head_dim 128 and 256, with tensor cores or not) and the transformers peer's compiled step (Inductor's and
# Triton's caches: on a fresh machine its first compile took over 170 s, where a warm one takes about 55)
PERF_JIT = """import json, subprocess, sys
WARM = '''import sys, torch
from lab.bench.attn_peers import FlashInferDecode
tc, d = sys.argv[1] == 'tc', int(sys.argv[2])
for hq, hkv in ((32, 8), (16, 8)) if d == 128 else ((16, 2),):
    q = torch.randn(2, hq, d, dtype=torch.bfloat16, device='cuda')
    k = torch.randn(8, 32, hkv, d, dtype=torch.bfloat16, device='cuda')
    table = torch.arange(8, dtype=torch.int32, device='cuda').view(2, 4)
    lens = torch.tensor([50, 128], dtype=torch.int32, device='cuda')
    FlashInferDecode(tc, q.device)(q, k, k, table, lens, d ** -0.5, None)
torch.cuda.synchronize()'''
runs = [(f'{tc} head_dim {d}', [sys.executable, '-c', WARM, tc, d]) for tc in ('tc', 'decode') for d in ('128', '256')]
hf = [sys.executable, '-m', 'lab', 'bench', 'decode', '--no-oracle', '--hf-compiled', '--batch', '1', '--steps', '4']
runs.append(('transformers compiled', hf))  # without a ledger folder: the warm-up writes no record
procs = [subprocess.Popen(argv, stdout=subprocess.DEVNULL) for _, argv in runs]
ready = [label for (label, _), p in zip(runs, procs) if p.wait() == 0]
summary = f'{len(ready)}/{len(runs)} peer caches ready: ' + ', '.join(ready)
open(sys.argv[1], 'w').write(json.dumps({'passed': len(ready) == len(runs), 'examined': len(runs), 'summary': summary}))
print(summary)
"""
PERF_ARMS = "default,flashinfer-tc,flashinfer,sdpa-cudnn,sdpa-flash"  # the engine's default arm and the four peers
PERF_BATCHES = (1, 8, 32)


def perf_steps(ctx: Context) -> list[Step]:
    """Issue #40's two tables from ledger records: the six attention shapes against the four peers, the decode step
    at batch 1, 8 and 32 against its floor and the compiled transformers peer, then `lab report perf` over the
    records this run wrote (each row's record, commit, tree and age; it fails unless every row has a clean one).
    `--step 'perf-*'` skips the peers' warm-up once a machine has their caches."""
    jit, report = ctx.result("peers-warm"), ctx.result("perf-report")
    attn = ("bandwidth", *"--workload attn-decode --shapes peers --reps 6 --arms".split(), PERF_ARMS)
    steps = [
        build_step(ctx),
        Step("peers-warm", 300, (PY, "-c", PERF_JIT, str(jit)), report_json(jit)),
        bench(ctx, "perf-attn", 110, attn),
    ]
    for b in PERF_BATCHES:
        args = ("decode", "--no-oracle", "--hf-compiled", "--batch", str(b), "--steps", "32")
        steps.append(bench(ctx, f"perf-decode-b{b}", 120, args))  # the peer's compile (55-60 s warm), then both timed
    argv = (PY, "-m", "lab", "report", "perf", "--ledger", str(ctx.ledger), "--json", str(report))
    steps.append(Step("perf-report", 30, argv, report_json(report)))
    return steps


# the seeded bugs and twins of each razor setting (lab/gates/teeth.py seeded_for), four processes at once
TEETH_SETS = {
    "fp32-probs": (
        "rmsnorm-round-after-weight eps-x10",
        "rope-fp32 window-off-by-one",
        "probs-rounded",
        "good-linear-fp32-accumulate good-online-split",
    ),
    "eager": (
        "rmsnorm-round-after-weight eps-x10",
        "rope-fp32 window-off-by-one",
        "probs-fp32",
        "good-linear-fp32-accumulate good-attention-split-pv",
    ),
}


def teeth_steps(ctx: Context) -> list[Step]:
    """The razor's teeth on the GPU (`gate teeth --device cuda --seeds 10`): each seeded bug caught at least 9 times
    in 10 and each correct twin flagged at most once; the setting is --razor-setting's, fp32-probs where that is
    left at eager (the setting the one-pass arm waits on)."""
    razor = "fp32-probs" if ctx.calib_razor == "eager" else ctx.calib_razor
    steps = []
    for i, bugs in enumerate(TEETH_SETS[razor]):
        out = ctx.result(f"teeth-{i}")
        argv = (PY, *"-m lab gate teeth --seeds 10 --device cuda --razor".split(), razor, "--bugs", *bugs.split())
        steps.append(
            Step(f"teeth-{i}", 270, (*argv, "--json", str(out), "--ledger", str(ctx.ledger)), report_json(out))
        )
    return steps


PHASES = {
    p.name: p
    for p in (
        Phase(
            "gates",
            480,
            "the CUDA build, token and near-tie gates (dense, MoE, d128), memcheck, runner GPU tests",
            gates_steps,
            jobs=4,
        ),
        Phase("bench", 1200, "bandwidth and A/B benchmarks, the Qwen3-0.6B decode step (ledger records)", bench_steps),
        Phase("serve", 900, "engine.LLM's GPU tests, the throughput benchmark against transformers", serve_steps),
        Phase(
            "reach",
            900,
            "every attention arm reached by a gate model, through the token gate and the razor",
            reach_steps,
        ),
        Phase(
            "flip", 3600, "the flip protocol with FLIP's flag settings (AGENTS.md)", flip_steps, derive=flip_ran, jobs=3
        ),
        Phase(
            "ncu",
            600,
            "Nsight Compute's limiter table of the default attention arm, cuDNN, the streamed GEMV and cuBLAS at 32 rows",
            ncu_steps,
            needs="ncu",
        ),
        Phase(
            "calib", 490, "the near-tie razor on FlashInfer and cuDNN decode attention (ENGINE-PERSISTENT)", calib_steps
        ),
        Phase(
            "perf",
            570,  # inside one device call; on a fresh machine the peers' first compile may leave the last steps out
            "issue #40's two tables: attention against four peers, the decode step against its floor and transformers "
            "compiled, from ledger records (ENGINE-PERSISTENT)",
            perf_steps,
        ),
        Phase(
            "teeth",
            300,
            "the near-tie razor's seeded bugs and twins on the GPU (ENGINE-PERSISTENT)",
            teeth_steps,
            jobs=4,
        ),
    )
}


# --- running --------------------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    phase: str
    step: str
    verdict: Verdict
    seconds: float = 0.0
    rc: int | None = None
    limit: int | None = None
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Running:
    step: Step
    limit: int
    proc: subprocess.Popen[Any]
    t0: float
    log: Path
    before: frozenset[str]
    files: Sequence[IO[str]]

    def poll(self) -> tuple[Verdict, int | None, float] | None:
        """None while it runs; else its verdict, exit status (None: timed out) and seconds."""
        rc = self.proc.poll()
        seconds = time.monotonic() - self.t0
        if rc is None and seconds <= self.limit:
            return None
        if rc is None:
            stop(self.proc)
        for f in self.files:
            f.close()
        if rc is None:
            return Verdict("fail", f"timed out after {self.limit}s ({self.log.name})"), None, seconds
        return self.step.reader(Finished(rc, self.log, self.before)), rc, seconds


def start(step: Step, limit: int, ctx: Context) -> Running | Verdict:
    """Start one step as its own process group (a timeout ends its children too), output to its log."""
    logs = ctx.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    ctx.result(step.name).parent.mkdir(parents=True, exist_ok=True)  # for a step that writes its result by path
    log = logs / f"{step.name}.log"
    before = frozenset(p.name for p in ctx.ledger.glob("*.json"))
    if step.stdout is not None:  # a result from an earlier run must not judge this one
        step.stdout.unlink(missing_ok=True)
        step.stdout.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **step.env}
    err = log.open("w")
    out = step.stdout.open("w") if step.stdout else err
    files = [err, out] if step.stdout else [err]
    try:
        proc = subprocess.Popen(
            step.argv,
            stdout=out,
            stderr=err if step.stdout else subprocess.STDOUT,
            env=env,
            cwd=ROOT,
            start_new_session=True,
        )
    except OSError as exc:
        for f in files:
            f.close()
        return Verdict("fail", f"did not start: {exc}")
    return Running(step, limit, proc, time.monotonic(), log, before, files)


def run_step(step: Step, limit: int, ctx: Context) -> tuple[Verdict, int | None, float]:
    """Run one step to its end or its limit; its reader judges what it wrote."""
    running = start(step, limit, ctx)
    if isinstance(running, Verdict):
        return running, None, 0.0
    while (done := running.poll()) is None:
        time.sleep(POLL)
    return done


def stop(proc: subprocess.Popen[Any]) -> None:
    """End the step's whole process group (a gate's workers too): TERM, then KILL after 5 s; the KILL also goes
    to members that outlived their leader (a worker that ignores TERM, or one still starting)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_phase(
    phase: Phase, ctx: Context, done: dict[str, Outcome], only: Sequence[str] = (), jobs: int | None = None
) -> list[Outcome]:
    """The steps in order, up to `jobs` (default: the phase's) at once within the phase's budget; a barrier step
    (the build, a model maker) runs alone, after what came before it. A step already run in this invocation (the
    build) is reused."""
    if phase.needs and shutil.which(phase.needs) is None:
        skip = Outcome(phase.name, phase.name, Verdict("skip", f"{phase.needs} not found on PATH"))
        print(f"== {phase.name}: skip: {skip.verdict.detail}", flush=True)
        return [skip]
    width = max(1, jobs or phase.jobs)
    print(f"== phase {phase.name} (budget {phase.budget}s, {width} at once): {phase.what}", flush=True)
    deadline = time.monotonic() + phase.budget
    pending = [
        s
        for s in phase.steps(ctx)
        if s.name not in done and (not only or s.barrier or any(fnmatch.fnmatch(s.name, p) for p in only))
    ]
    order = {s.name: i for i, s in enumerate(pending)}
    outcomes: list[Outcome] = []
    running: list[Running] = []

    def record(outcome: Outcome) -> None:
        done[outcome.step] = outcome
        outcomes.append(outcome)
        print(f"== {outcome.step}: {line(outcome)}", flush=True)

    while pending or running:
        while pending and len(running) < width:
            step = pending[0]
            if running and (step.barrier or running[-1].step.barrier):
                break  # a barrier step runs alone
            pending.pop(0)
            limit = min(step.limit, int(deadline - time.monotonic()))
            if limit < MIN_LEFT:
                record(Outcome(phase.name, step.name, Verdict("fail", f"not run: past the {phase.budget}s budget")))
                continue
            started = start(step, limit, ctx)
            if isinstance(started, Verdict):
                record(Outcome(phase.name, step.name, started, 0.0, None, limit, list(step.argv), dict(step.env)))
                continue
            running.append(started)
        for r in list(running):
            if (result := r.poll()) is not None:
                running.remove(r)
                verdict, rc, seconds = result
                record(
                    Outcome(phase.name, r.step.name, verdict, seconds, rc, r.limit, list(r.step.argv), dict(r.step.env))
                )
        if running:
            time.sleep(POLL)
    outcomes.sort(key=lambda o: order[o.step])
    if phase.derive is not None:
        for name, verdict in phase.derive(ctx):
            outcomes.append(Outcome(phase.name, name, verdict))
            print(f"== {name}: {verdict.status}: {verdict.detail}", flush=True)
    return outcomes


def line(o: Outcome) -> str:
    took = f" {o.seconds:.0f}s" if o.rc is not None or o.seconds else ""
    return f"{o.verdict.status}{took}: {o.verdict.detail}"


def render(outcomes: Sequence[Outcome]) -> str:
    width = max((len(o.step) for o in outcomes), default=4)
    rows = [f"{'step':{width}}  verdict  time  detail"]
    for o in outcomes:
        took = f"{o.seconds:4.0f}s" if o.rc is not None or o.seconds else "    -"
        rows.append(f"{o.step:{width}}  {o.verdict.status:7}  {took} {o.verdict.detail}"[:200])
    failed = sum(not o.verdict.ok for o in outcomes)
    rows.append(f"ci: {'PASS' if not failed and outcomes else 'FAIL'}: {len(outcomes)} steps, {failed} failed")
    return "\n".join(rows)


def write_verdicts(ctx: Context, phases: Sequence[str], outcomes: Sequence[Outcome]) -> None:
    passed = bool(outcomes) and all(o.verdict.ok for o in outcomes)
    data = {
        "phases": list(phases),
        "passed": passed,
        "steps": [
            {
                "phase": o.phase,
                "step": o.step,
                "status": o.verdict.status,
                "detail": o.verdict.detail,
                "seconds": round(o.seconds, 1),
                "rc": o.rc,
                "limit": o.limit,
                "argv": o.argv,
                "env": o.env,
            }
            for o in outcomes
        ],
    }
    (ctx.out / "ci-verdicts.json").write_text(json.dumps(data, indent=1) + "\n")
    with tarfile.open(ctx.out / "ledger.tgz", "w:gz") as tar:
        for d in ("ledger", "logs", "results", "goldens"):
            if (ctx.out / d).is_dir():
                tar.add(ctx.out / d, arcname=d)


def run(phases: Sequence[Phase], ctx: Context, only: Sequence[str] = (), jobs: int | None = None) -> int:
    ctx.ledger.mkdir(parents=True, exist_ok=True)
    done: dict[str, Outcome] = {}
    outcomes = [o for p in phases for o in run_phase(p, ctx, done, only, jobs)]
    write_verdicts(ctx, [p.name for p in phases], outcomes)
    print()
    print(render(outcomes))
    return 0 if outcomes and all(o.verdict.ok for o in outcomes) else 1


# --- the command line -----------------------------------------------------------------------------------------------

FLAG_SETTING = re.compile(r"^VT_[A-Z0-9_]+=\S*$")


def parse_flip(flip: str, models: str = "", filters: str = "", prompt_lens: str = "") -> Flip:
    """FLIP="VT_X=1 VT_Y=1" and its companions, checked before any phase runs (ValueError names the bad entry)."""
    entries = flip.split()
    if not entries:
        raise ValueError('flip: set FLIP (or --flip) to the flag settings under test, e.g. FLIP="VT_ATTN_ONEPASS=1"')
    for kv in entries:
        if not FLAG_SETTING.match(kv):
            raise ValueError(f"flip: FLIP entry '{kv}' is not VT_NAME=VALUE")
    for m in models.split():
        if m not in FLIP_MODELS:
            raise ValueError(f"flip: FLIP_MODELS entry '{m}' is not {', '.join(FLIP_MODELS[:-1])} or {FLIP_MODELS[-1]}")
    if prompt_lens and not re.fullmatch(r"[1-9]\d*(,[1-9]\d*)*", prompt_lens):
        raise ValueError(f"flip: FLIP_PROMPT_LENS '{prompt_lens}' is not comma-separated lengths, e.g. 1,6,13")
    settings = tuple((kv.split("=", 1)[0], kv.split("=", 1)[1]) for kv in entries)
    # a flip of decode attention alone (every flag VT_ATTN_*) gates the models whose shapes take its arms
    attention = all(k.startswith("VT_ATTN_") for k, _ in settings)
    default = ("d128", "d128-g4", "long") if attention else ("dense", "d128", "moe")
    return Flip(settings, tuple(models.split()) or default, tuple(filters.split()), prompt_lens or None)


def build_parser() -> argparse.ArgumentParser:
    env = os.environ
    p = argparse.ArgumentParser(
        prog="python -m lab ci",
        description="The GPU job: phases of steps, each judged by the JSON or ledger record it writes; a verdict "
        "table last ($OUT/ci-verdicts.json). Phases: "
        + "; ".join(f"{ph.name} ({ph.budget}s): {ph.what}" for ph in PHASES.values()),
        epilog="Ledger records name their commit: on a copy of the tree without .git, run `python -m lab.gates.ledger "
        "manifest` in the clean checkout first and carry .tree-manifest.json. Set VT_CUDA_ARCHS (default 9.0) and "
        "VT_CUDA_CACHE (default /tmp/vt-cuda-cache) for the build.",
    )
    p.add_argument("phases", nargs="*", metavar="PHASE", help=f"default: {' '.join(DEFAULT_PHASES)}")
    p.add_argument(
        "--out",
        type=Path,
        default=env.get("OUT") or None,
        help="results directory (default: $OUT, else a new temporary directory)",
    )
    p.add_argument(
        "--step",
        action="append",
        default=[],
        metavar="GLOB",
        help="run only the steps matching GLOB (repeatable; the barrier steps, the build and the model makers, always run)",
    )
    p.add_argument(
        "--jobs", type=int, default=None, metavar="N", help="steps at once (default: each phase's; 1 for benchmarks)"
    )
    p.add_argument("--list", action="store_true", help="print each phase's steps (limit, env, argv) and exit")
    p.add_argument(
        "--flip",
        default=env.get("FLIP", ""),
        metavar="'VT_X=1 ...'",
        help="flip: the flag settings under test (default: $FLIP)",
    )
    p.add_argument(
        "--flip-models",
        default=env.get("FLIP_MODELS", ""),
        metavar="'M ...'",
        help=f"flip: models among {' '.join(FLIP_MODELS)} (default: $FLIP_MODELS; else dense d128 moe, "
        "or d128 d128-g4 long when every flag is VT_ATTN_*)",
    )
    p.add_argument(
        "--flip-filter",
        default=env.get("FLIP_FILTER", ""),
        metavar="'attn/ ...'",
        help="flip: the kernel numerics cases (default: $FLIP_FILTER; empty: all)",
    )
    p.add_argument(
        "--razor-setting",
        choices=sorted(CALIB_ORACLE),
        default=env.get("CALIB_RAZOR") or "eager",
        help="calib: judge the production kernels by this razor setting, against its own oracle (default: "
        "$CALIB_RAZOR, else eager: the eager and SDPA oracles); teeth: the setting measured (eager there: fp32-probs)",
    )
    p.add_argument(
        "--flip-prompt-lens",
        default=env.get("FLIP_PROMPT_LENS", ""),
        metavar="N,N,..",
        help="flip: the razor's prompt lengths, but long's (default: $FLIP_PROMPT_LENS)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    names = args.phases or list(DEFAULT_PHASES)
    unknown = [n for n in names if n not in PHASES]
    if unknown:
        print(
            f"lab ci: unknown phase {', '.join(unknown)} (phases: {', '.join(PHASES)}; the one-off phases of "
            "finished rows are in docs/CI.md)",
            file=sys.stderr,
        )
        return 2
    flip = None
    if "flip" in names:
        try:
            flip = parse_flip(args.flip, args.flip_models, args.flip_filter, args.flip_prompt_lens)
        except ValueError as exc:
            print(f"lab ci {exc}", file=sys.stderr)
            return 2
    os.environ.setdefault("VT_CUDA_ARCHS", "9.0")
    os.environ.setdefault("VT_CUDA_CACHE", "/tmp/vt-cuda-cache")
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="lab-ci-"))
    ctx = Context(out.resolve(), flip, args.razor_setting)
    phases = [PHASES[n] for n in names]
    if args.list:
        for phase in phases:
            print(f"{phase.name} (budget {phase.budget}s, {phase.jobs} at once): {phase.what}")
            for s in phase.steps(ctx):
                env = " ".join(f"{k}={v}" for k, v in s.env.items())
                cmd = " ".join(s.argv).replace("\n", "; ")
                print(f"  {s.name} {s.limit}s {env + ' ' if env else ''}{cmd}"[:300])
        return 0
    if flip is not None:
        print(f"flip protocol with: {' '.join(f'{k}={v}' for k, v in flip.settings)} (models: {' '.join(flip.models)})")
    if not (ROOT / ".git").exists() and not (ROOT / ".tree-manifest.json").exists():
        print(
            "note: no .git and no .tree-manifest.json: ledger records will refuse this tree (run `python -m "
            "lab.gates.ledger manifest` in the clean checkout and carry it)",
            file=sys.stderr,
        )
    print(f"lab ci: {' '.join(names)} -> {out}", flush=True)
    return run(phases, ctx, args.step, args.jobs)
