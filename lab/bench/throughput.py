"""Offline throughput: output tokens per second of engine.LLM against transformers' batched generate.

nano-vllm's benchmark shape: --requests random prompts (random token ids) whose input and output
lengths are uniform in [--min-len, --max-len], sampled at --temperature with EOS ignored, so every
request generates exactly its output length. On a GPU the model has Qwen3-0.6B's shape with random
bf16 weights; the peer is transformers' `generate` on the same weights in the same run: one padded
batch (left padding) with a static cache, compiled by torch.compile unless --no-peer-compile. The peer
runs until its longest request is done or --peer-budget-s has passed (transformers' max_time), whichever
comes first, after an untimed warm-up of the same shapes; its rate is its steady state: per request, only
the tokens up to its own output length, made after its first 8 timed steps, over the time those steps took
(its prefill and the early steps, where every row is still live, are left out or favoured: the rate flatters
the peer). Fewer than 32 such steps within the budget: no rate and no ratio. The headline ratio is the engine's
whole run (prefill included) against that steady state; a second, labelled whole-run ratio sets the engine's
whole run against the peer's whole timed generate (prefill included; the same count of each request's own
tokens). Progress goes to stderr.
--ab-flag VT_X[,VT_Y...] times the engine with the flags off, then with the first on, the first two on, ...,
on the same engine (its snapshot swapped; each arm captures its own decode graphs once), the arms interleaved
for --ab-reps rounds (rep 0 dropped from 3 on; the median run stands, with the min-max band); each point
also splits the engine's time into its decode and mixed (prefill) steps, and reports the host's share of a
decode step: the milliseconds per step spent outside the model (the scheduler, the step's rows and outputs, the
inputs staged), clocked by this benchmark's TimedRunner, which on a GPU do not overlap the device.
Each point of --sweep (numbers of requests) uses fresh prompts, so no point hits the prefix cache of
another. The CPU smoke mode (--smoke, the default without CUDA) runs the embedded tiny model.

    python -m lab bench throughput [--requests 256] [--sweep 64,256] [--plot tps.svg] [--ledger DIR]
    python -m lab bench throughput --sweep 256 --ab-flag VT_PREFILL_ATTN,VT_SAMPLE_ROWS_KERNEL --peer-budget-s 90
    python -m lab bench throughput --smoke --requests 8 --max-len 32
"""

from __future__ import annotations

import argparse
import functools
import gc
import hashlib
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from engine.flags import FLAGS, FlagSnapshot
from engine.llm import LLM
from engine.model.config import load_config
from engine.runner import PreparedDecode, Runner, StepRow
from engine.sampling_params import SamplingParams
from lab.bench.requests import model_for, workload
from lab.bench.timing import device_name
from lab.gates.ledger import write_record

TARGET_TOK_PER_S = 10_000  # issue #18's H200 target, and at least TARGET_RATIO x the transformers peer
TARGET_RATIO = 5.0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m lab bench throughput",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--smoke", action="store_true", help="the embedded tiny model on the CPU (default without CUDA)")
    p.add_argument("--requests", type=int, help="requests at the largest point (default 256; smoke 8)")
    p.add_argument("--sweep", help="comma-separated request counts to run (default: requests/4 and requests)")
    p.add_argument("--min-len", type=int, help="shortest input and output (default 100; smoke max-len/4)")
    p.add_argument("--max-len", type=int, help="longest input and output (default 1024; smoke 32)")
    p.add_argument("--temperature", type=float, default=0.6, help="sampling temperature (default 0.6)")
    p.add_argument("--max-num-seqs", type=int, default=256, help="engine: running requests at most (default 256)")
    p.add_argument("--max-num-batched-tokens", type=int, help="engine: tokens per step (default 16384; smoke 256)")
    p.add_argument("--no-peer", action="store_true", help="skip transformers")
    p.add_argument("--no-peer-compile", action="store_true", help="transformers without torch.compile")
    p.add_argument(
        "--peer-budget-s",
        type=float,
        default=120.0,
        help="stop the peer's timed generate after this many seconds and count the tokens it made (default 120)",
    )
    p.add_argument(
        "--row",
        action="append",
        default=[],
        metavar="ROW-ID",
        help="with --ledger: a roadmap row the record also evidences (repeatable), beside ENGINE-SERVE",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measure engine then peer this many times in this run; each point's ratio is then the ratio of their "
        "medians, with the per-round ratios beside it (default 1; 5 for the noisy CPU smoke)",
    )
    p.add_argument(
        "--ab-reps", type=int, default=3, help="with --ab-flag: runs per arm, interleaved; rep 0 dropped (default 3)"
    )
    p.add_argument(
        "--ab-flag",
        metavar="VT_X[,VT_Y]",
        help="time the engine with these boolean flags off, then turned on one more at a time",
    )
    p.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="the engine's and the peer's seconds: wall (default) or cpu, this process's CPU time (the CPU smoke "
        "only: the tiny model runs on one thread, the engine's rule for tiny models, which the peer shares in this "
        "process, so it is the run's own work, whatever else loads the machine)",
    )
    p.add_argument(
        "--serving",
        action="store_true",
        help="then lab bench serving's ratios at the largest point, on a fresh engine: logprobs=5 / plain and "
        "the OpenAI server / offline LLM.generate (printed last; 3 rounds, the medians)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", type=Path, metavar="FILE.svg", help="tok/s against the number of requests")
    p.add_argument("--json", action="store_true", help="print the record as JSON")
    p.add_argument("--ledger", type=Path, metavar="DIR", help="write the ledger record into DIR")
    p.add_argument(
        "--allow-dirty",
        action="store_true",
        help="write the ledger record from a tree that differs from HEAD (recorded as dirty)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    smoke = args.smoke or not torch.cuda.is_available()
    if not args.smoke and smoke:  # said first, before any model loads: a CPU run measures no GPU speed
        print(
            "bench throughput: no CUDA device: the CPU smoke run on the tiny model (it checks the harness and the "
            "outputs; its tok/s is no measure of the engine's GPU speed)",
            file=sys.stderr,  # stderr: --json keeps stdout one record
        )
    requests = args.requests or (8 if smoke else 256)
    max_len = args.max_len or (32 if smoke else 1024)
    min_len = args.min_len or (max(1, max_len // 4) if smoke else min(100, max_len))
    try:
        sweep = (
            sorted({int(x) for x in args.sweep.split(",")}) if args.sweep else sorted({max(1, requests // 4), requests})
        )
    except ValueError:
        print(f"error: --sweep {args.sweep!r}: expected comma-separated integers", file=sys.stderr)
        return 2
    if not 1 <= min_len <= max_len or min(sweep) < 1:
        print(
            f"error: need 1 <= --min-len ({min_len}) <= --max-len ({max_len}) and request counts >= 1", file=sys.stderr
        )
        return 2
    ab_flags = args.ab_flag.split(",") if args.ab_flag else []
    bad = [f for f in ab_flags if f not in FLAGS or not FLAGS[f].is_bool]
    if bad:
        print(f"error: --ab-flag {','.join(bad)}: not a boolean flag of engine/flags.py", file=sys.stderr)
        return 2
    if args.ab_reps < 1:
        print(f"error: --ab-reps {args.ab_reps}: must be at least 1", file=sys.stderr)
        return 2
    if args.rounds < 1:
        print(f"error: --rounds {args.rounds}: must be at least 1", file=sys.stderr)
        return 2
    if args.peer_budget_s <= 0:
        print(f"error: --peer-budget-s {args.peer_budget_s}: must be positive", file=sys.stderr)
        return 2
    if args.clock == "cpu" and not smoke:
        print("error: --clock cpu: the CPU smoke only (a GPU's work is not this process's CPU time)", file=sys.stderr)
        return 2
    device = "cpu" if smoke else "cuda"
    budget = args.max_num_batched_tokens or (256 if smoke else 16384)
    global _clock
    _clock = CLOCKS[args.clock]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            model_dir = model_for(Path(tmp), smoke)
            records = []
            for i in range(args.rounds):
                if args.rounds > 1:
                    print(f"round {i + 1}/{args.rounds}", file=sys.stderr)
                records.append(
                    measure(
                        model_dir,
                        sweep,
                        device=device,
                        min_len=min_len,
                        max_len=max_len,
                        temperature=args.temperature,
                        max_num_seqs=args.max_num_seqs,
                        max_num_batched_tokens=budget,
                        peer=not args.no_peer,
                        peer_compile=not args.no_peer_compile and not smoke,
                        seed=args.seed,
                        peer_budget_s=args.peer_budget_s,
                        ab_flags=ab_flags,
                        ab_reps=args.ab_reps,
                    )
                )
            record = combine_rounds(records)
            if args.serving:  # after the peer: the engine and the server own the device alone
                from lab.bench import serving  # why: it loads the server's dependencies

                record["serving"] = serving.measure(model_dir, device, max(sweep), min_len, max_len, 3, args.seed)
    finally:
        _clock = CLOCKS["wall"]
    cpu_threads = torch.get_num_threads()  # what the peer ran with (the engine sets it: engine/runner.py)
    record["model"] = "embedded tiny-qwen3" if smoke else "Qwen3-0.6B shape, random bf16 weights"
    record["cpu_threads"], record["clock"] = cpu_threads, args.clock
    print_report(record)
    if "serving" in record:
        print(f"serving at {max(sweep)} requests: {serving.ratios_line(record['serving'])}")
    if args.plot:
        args.plot.write_text(svg_plot(record))
        print(f"plot: {args.plot}")
    if args.json:
        print(json.dumps(record))
    if args.ledger:
        cmd = "python -m lab bench throughput " + " ".join(argv if argv is not None else sys.argv[1:])
        top = record["points"][-1]
        summary = f"{top['requests']} requests: engine {top['engine_tok_per_s']:.0f} output tok/s" + (
            f", transformers {top['peer_tok_per_s']:.0f}, {top['ratio']:.2f}x" if "ratio" in top else ""
        )
        path = write_record(
            args.ledger,
            "serve-throughput",
            list(dict.fromkeys(["ENGINE-SERVE", *args.row])),
            cmd,
            record["device"],
            summary,
            record,
            kind="bench",
            allow_dirty=args.allow_dirty,
        )
        print(f"ledger: {path}")
    return 0


def measure(
    model_dir: Path,
    sweep: list[int],
    *,
    device: str,
    min_len: int,
    max_len: int,
    temperature: float,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    peer: bool,
    peer_compile: bool,
    seed: int,
    peer_budget_s: float = 120.0,
    ab_flags: list[str] | None = None,
    ab_reps: int = 3,
) -> dict[str, Any]:
    vocab = load_config(model_dir).vocab_size
    loads = {n: workload(n, min_len, max_len, vocab, seed + 1000 * i) for i, n in enumerate(sweep)}
    record = engine_record(
        model_dir,
        sweep,
        loads,
        device=device,
        max_len=max_len,
        temperature=temperature,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        seed=seed,
        ab_flags=ab_flags or [],
        ab_reps=ab_reps,
    )
    record.update(
        lengths=[min_len, max_len],
        peer=("transformers generate, static cache" + (" + torch.compile" if peer_compile else "")) if peer else None,
    )
    points = record["points"]
    _release(device)  # the engine, its KV cache and its graphs are gone with engine_record's frame
    if device == "cuda":
        print(f"engine released: {torch.cuda.memory_allocated() / 2**30:.1f} GiB still allocated", file=sys.stderr)
    if peer:
        for point in points:
            prompts, outs = loads[point["requests"]]
            try:
                seconds, done, times = run_peer(
                    model_dir, device, prompts, max(outs), temperature, peer_compile, peer_budget_s
                )
            except Exception as exc:  # noqa: BLE001 - the engine's numbers stand; the peer's failure is reported
                point["peer_error"] = f"{exc.__class__.__name__}: {str(exc)[:300]}"
                continue
            point.update(peer_s=seconds, peer_steps=done, peer_complete=done >= max(outs))
            rate = peer_rate(outs, done, times)
            if rate is None:  # compilation or warm-up took the window: no rate, so no ratio
                point["peer_error"] = (
                    f"no steady state: {done} steps in {seconds:.1f}s, fewer than the {PEER_SKIP_STEPS} skipped + "
                    f"{PEER_MIN_STEADY_STEPS} timed steps a rate needs (raise --peer-budget-s)"
                )
                continue
            point.update(
                peer_tok_per_s=rate,
                peer_counted_tokens=sum(min(done, m) for m in outs),  # each request's own tokens among those made
                peer_generated_tokens=len(outs) * done,
                ratio=point["engine_tok_per_s"] / rate,
            )
            # both whole runs, prefill included: the peer's timed generate against the engine's run
            if seconds > 0:
                point["peer_whole_tok_per_s"] = point["peer_counted_tokens"] / seconds
                point["whole_ratio"] = point["engine_tok_per_s"] / point["peer_whole_tok_per_s"]
            for arm in point.get("arms", {}).values():
                arm["ratio"] = arm["engine_tok_per_s"] / rate
    top = points[-1]
    record["targets"] = {
        "tok_per_s": TARGET_TOK_PER_S,
        "ratio": TARGET_RATIO,
        "met": device == "cuda"
        and top["engine_tok_per_s"] >= TARGET_TOK_PER_S
        and top.get("ratio", 0.0) >= TARGET_RATIO,
    }
    return record


def combine_rounds(records: list[dict[str, Any]]) -> dict[str, Any]:
    """One record from several rounds of the same measurement: the last round's, each point's rates replaced by
    their medians over the rounds and its ratios by the ratios of those medians (the engine's and the peer's noise
    each damped before they are divided), with every round's ratio kept beside them."""
    record = records[-1]
    if len(records) == 1:
        return record
    for i, point in enumerate(record["points"]):
        rounds = [r["points"][i] for r in records]
        engine = statistics.median(p["engine_tok_per_s"] for p in rounds)
        point["rounds"] = {
            "n": len(rounds),
            "engine_tok_per_s": [round(p["engine_tok_per_s"], 1) for p in rounds],
            "ratio": [round(p["ratio"], 4) for p in rounds if "ratio" in p],
            "whole_ratio": [round(p["whole_ratio"], 4) for p in rounds if "whole_ratio" in p],
        }
        point["engine_tok_per_s"] = engine
        point["engine_s"] = statistics.median(p["engine_s"] for p in rounds)
        peers = [p["peer_tok_per_s"] for p in rounds if "peer_tok_per_s" in p]
        if peers:
            point["peer_tok_per_s"] = statistics.median(peers)
            point["peer_s"] = statistics.median(p["peer_s"] for p in rounds if "peer_tok_per_s" in p)
            point["ratio"] = engine / point["peer_tok_per_s"]
        wholes = [p["peer_whole_tok_per_s"] for p in rounds if "peer_whole_tok_per_s" in p]
        if wholes:
            point["peer_whole_tok_per_s"] = statistics.median(wholes)
            point["whole_ratio"] = engine / point["peer_whole_tok_per_s"]
    return record


def ab_arms(base: FlagSnapshot, flags: list[str]) -> list[tuple[str, FlagSnapshot]]:
    """(label, snapshot) per arm: every flag off, then one more on at a time; just `base` without flags."""
    if not flags:
        return [("", base)]
    arms = []
    for k in range(len(flags) + 1):
        on = set(flags[:k])
        label = " ".join(f"{f}={int(f in on)}" for f in flags)
        arms.append((label, base.with_(**{f: f in on for f in flags})))
    return arms


class TimedRunner(Runner):
    """The engine's Runner with a wall clock on its public step methods (LLM(runner_class=TimedRunner)): seconds
    of the decode and mixed steps (each ends in its one host read, so the host clock is the device's; with
    VT_ASYNC_SCHEDULE a decode step's seconds run from its launch to its read, launch_decode to read_tokens),
    the host seconds that stage a decode step's inputs (prepare_decode), and the host's seconds between two
    calls into the runner (the scheduler, the step's rows, the last step's outputs), each gap counted to the
    kind of step it leads to. On a GPU none of that host time overlaps the device, except under
    VT_ASYNC_SCHEDULE."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.last_exit: float | None = None  # when the last outermost call returned; None: no gap to count
        self.reset_clock()
        self._depth = 0  # only the outermost call is clocked for the gaps (run_step calls prepare_decode)

    def _timed(self, decode: bool, fn: Any, *args: Any) -> tuple[Any, float, float]:
        t0 = clock()
        if not self._depth and self.last_exit is not None:
            self.scheduler_s[decode] += t0 - self.last_exit
        self._depth += 1
        try:
            out = fn(*args)
        finally:
            self._depth -= 1
            t1 = clock()
            if not self._depth:
                self.last_exit = t1
        return out, t0, t1

    def run_step(self, rows: list[StepRow], decode: bool) -> list[int]:
        out, t0, t1 = self._timed(decode, super().run_step, rows, decode)
        self.seconds[decode] += t1 - t0
        self.count[decode] += 1
        return out

    def prepare_decode(self, rows: list[StepRow]) -> PreparedDecode:
        out, t0, t1 = self._timed(True, super().prepare_decode, rows)
        self.decode_inputs_s += t1 - t0
        return out

    def launch_decode(self, prepared: PreparedDecode, tokens: list[int]) -> torch.Tensor:
        out, _, t1 = self._timed(True, super().launch_decode, prepared, tokens)
        self.launched.append(t1)
        return out

    def read_tokens(self, out: torch.Tensor | tuple[torch.Tensor, ...], n: int) -> list[int]:
        tokens, _, t1 = self._timed(True, super().read_tokens, out, n)
        if self.launched:
            self.seconds[True] += t1 - self.launched.pop()
            self.count[True] += 1
        return tokens

    def reset_clock(self) -> None:
        """Zero the clock; the host time before the next call (a run's request checks) is not a gap."""
        self.seconds = {True: 0.0, False: 0.0}
        self.count = {True: 0, False: 0}
        self.scheduler_s = {True: 0.0, False: 0.0}
        self.decode_inputs_s = 0.0
        self.last_exit = None
        self.launched: list[float] = []

    def split(self) -> dict[str, float]:
        return {
            "decode_s": self.seconds[True],
            "decode_steps": self.count[True],
            "mixed_s": self.seconds[False],
            "mixed_steps": self.count[False],
            "decode_inputs_s": self.decode_inputs_s,
            "decode_scheduler_s": self.scheduler_s[True],
            "mixed_scheduler_s": self.scheduler_s[False],
        }


class ArmSwitch:
    """Sets the runner's flag snapshot to an A/B arm's. The runner keeps each snapshot's captured decode graphs
    apart (and destroys none: they share its graph pool), so an arm used again replays its own graphs."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.current: str | None = None
        self.seen: set[str] = set()

    def use(self, label: str, flags: FlagSnapshot) -> bool:
        """Switch to the arm; True on its first use (its graphs are yet to be captured)."""
        if self.current == label:
            return False
        self.runner.flags = flags
        self.current = label
        first = label not in self.seen
        self.seen.add(label)
        return first


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median run (by seconds) of an arm, with the tok/s band over its runs and its ms per decode step."""
    ordered = sorted(runs, key=lambda t: t["engine_s"])
    mid = dict(ordered[(len(ordered) - 1) // 2])
    rates = [t["engine_tok_per_s"] for t in runs]
    mid.update(
        runs=len(runs),
        tok_per_s_min=min(rates),
        tok_per_s_max=max(rates),
        decode_ms_per_step=1e3 * mid["decode_s"] / max(1, mid["decode_steps"]),
    )
    return mid


def engine_record(
    model_dir: Path,
    sweep: list[int],
    loads: dict[int, tuple[list[list[int]], list[int]]],
    *,
    device: str,
    max_len: int,
    temperature: float,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    seed: int,
    ab_flags: list[str],
    ab_reps: int,
) -> dict[str, Any]:
    """The engine's side of the record: one LLM for every point and arm, all of it dropped on return (the peer
    then has the device's memory)."""
    base = FlagSnapshot.from_env()
    arms = ab_arms(base, ab_flags or [])
    llm = LLM(
        model_dir,
        "bfloat16" if device == "cuda" else "float32",
        device,
        max_num_seqs=max_num_seqs,
        max_model_len=2 * max_len + 1,
        block_size=16,
        max_num_batched_tokens=max_num_batched_tokens,
        enable_prefix_caching=False,  # random prompts share no prefix; two arms must not share blocks
        flags=base,
        runner_class=TimedRunner,
    )
    steps = llm.runner
    assert isinstance(steps, TimedRunner)
    switch = ArmSwitch(steps)
    reps = ab_reps if ab_flags else 1
    warm = min(max(sweep), max_num_seqs)  # the largest batch a point runs: every graph it replays is captured
    points = [engine_point(llm, steps, switch, n, loads[n], arms, reps, device, warm, temperature, seed) for n in sweep]
    return {
        "device": device_name(torch.device(device)),
        "on_gpu": device == "cuda",
        "dtype": str(llm.runner.dtype).removeprefix("torch."),
        "temperature": temperature,
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": max_num_batched_tokens,
        "num_blocks": llm.runner.blocks.num_blocks,
        "graph": llm.runner.use_graph,
        "engine_stats": dict(llm.stats),
        "ab_flags": ab_flags or [],
        "ab_reps": reps,
        "prefix_caching": False,
        "points": points,
    }


def engine_point(
    llm: Any,
    steps: TimedRunner,
    switch: ArmSwitch,
    n: int,
    load: tuple[list[list[int]], list[int]],
    arms: list[tuple[str, FlagSnapshot]],
    reps: int,
    device: str,
    warm: int,
    temperature: float,
    seed: int,
) -> dict[str, Any]:
    """One point of the sweep: every arm run `reps` times, interleaved, each arm's median run with its band."""
    prompts, outs = load
    vocab = llm.runner.config.vocab_size
    point: dict[str, Any] = {"requests": n, "output_tokens": sum(outs), "input_tokens": sum(map(len, prompts))}
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in arms}
    for rep in range(reps):  # the arms interleaved, rep after rep
        for label, flags in arms:
            if switch.use(label, flags):  # first use: its graphs are captured before any timing
                warm_up(llm, warm, vocab, temperature)
            steps.reset_clock()
            digest: list[str] = []
            seconds = _timed(device, functools.partial(run_engine, llm, prompts, outs, temperature, seed, digest))
            split = steps.split()
            runs[label].append(
                {
                    "engine_s": seconds,
                    "engine_tok_per_s": sum(outs) / seconds,
                    **split,
                    "host_ms_per_decode_step": host_ms(split),
                    "graph": llm.runner.use_graph,  # False: a capture failed and decode steps ran eagerly
                    "tokens": digest[0],
                }
            )
            print(
                f"engine {label or 'default flags'} rep {rep}: {n} requests, {sum(outs) / seconds:.0f} tok/s in "
                f"{seconds:.1f}s ({1e3 * steps.seconds[True] / max(1, steps.count[True]):.2f} ms/decode step, "
                f"host {runs[label][-1]['host_ms_per_decode_step']:.2f} ms of it)",
                file=sys.stderr,
            )
    for label, _ in arms:
        timing = summarize(runs[label][1:] if reps > 2 else runs[label])  # rep 0 dropped when there are 3+
        timing["tokens_same_every_run"] = len({r["tokens"] for r in runs[label]}) == 1
        if label:
            point.setdefault("arms", {})[label] = timing
        point.update(timing, engine_arm=label or "environment")  # the last arm's (every flag on) stands
    return point


def host_ms(split: dict[str, float]) -> float:
    """Host milliseconds per decode step outside the model: its inputs staged, and the host's time before it
    (the scheduler, its rows, the last step's outputs)."""
    return 1e3 * (split["decode_inputs_s"] + split["decode_scheduler_s"]) / max(1, split["decode_steps"])


def warm_up(llm: Any, n: int, vocab: int, temperature: float) -> None:
    """Module loads, kernel builds and one decode graph per padded batch size up to n, before any timing."""
    rng = random.Random(7)
    prompts = [[rng.randrange(vocab) for _ in range(8)] for _ in range(n)]
    llm.generate(
        prompts, [SamplingParams(temperature=temperature, max_tokens=i + 2, ignore_eos=True, seed=i) for i in range(n)]
    )


def run_engine(
    llm: Any, prompts: list[list[int]], outs: list[int], temperature: float, seed: int, digest: list[str]
) -> None:
    """Every request to its length; appends a digest of all generated tokens to `digest` (arms compared)."""
    params = [
        SamplingParams(temperature=temperature, max_tokens=m, ignore_eos=True, seed=seed + i)
        for i, m in enumerate(outs)
    ]
    results = llm.generate(prompts, params)
    got = [len(r.token_ids) for r in results]
    if got != outs:
        raise RuntimeError(f"engine generated {sum(got)} tokens, expected {sum(outs)}")
    h = hashlib.blake2b(digest_size=8)
    for r in results:
        h.update(b"".join(int(t).to_bytes(4, "little") for t in r.token_ids))
    digest.append(h.hexdigest())


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
_clock = CLOCKS["wall"]  # --clock: what the engine's and the peer's seconds are


def clock() -> float:
    return _clock()


PEER_SKIP_STEPS = 8  # the timed run's first steps (its prefill, any late compilation) are left out of its rate
PEER_MIN_STEADY_STEPS = 32  # fewer timed steps than this after the skipped ones: no rate


def peer_rate(outs: list[int], done: int, times: list[float]) -> float | None:
    """The peer's steady-state rate: each request's own tokens made in steps PEER_SKIP_STEPS+1 .. done, over the
    time those steps took (times[s - 1]: when step s ended); None with fewer than PEER_MIN_STEADY_STEPS of them.
    Its prefill and first steps are left out, which flatters the peer."""
    if done - PEER_SKIP_STEPS < PEER_MIN_STEADY_STEPS or len(times) < done:
        return None
    tokens = sum(max(0, min(done, m) - PEER_SKIP_STEPS) for m in outs)
    seconds = times[done - 1] - times[PEER_SKIP_STEPS - 1]
    return tokens / seconds if seconds > 0 else None


def run_peer(
    model_dir: Path,
    device: str,
    prompts: list[list[int]],
    max_new: int,
    temperature: float,
    compile_: bool,
    budget_s: float = 120.0,
) -> tuple[float, int, list[float]]:
    """Seconds, new tokens per row and each step's end (seconds from the start) of one timed batched generate,
    stopped after budget_s (after an untimed one of the same shapes, stopped after its first steps: compile,
    autotune, graph capture)."""
    from transformers import (  # why: transformers takes seconds to import
        AutoModelForCausalLM,
        GenerationConfig,
        StoppingCriteria,
        StoppingCriteriaList,
    )

    class Progress(StoppingCriteria):
        """Prints the step, the time and the ETA on stderr every EVERY steps; stops every row at `stop_at` steps."""

        EVERY = 64

        def __init__(self, label: str, width: int, stop_at: int | None = None) -> None:
            self.label, self.width, self.stop_at, self.t0 = label, width, stop_at, clock()
            self.times: list[float] = []  # when each step ended, seconds from the start

        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **_: Any) -> torch.Tensor:
            step = input_ids.shape[1] - self.width
            self.times.append(clock() - self.t0)
            if self.stop_at is not None and step >= self.stop_at:
                print(f"peer {self.label}: {step} steps in {clock() - self.t0:.1f}s", file=sys.stderr)
                return torch.ones(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
            if step % self.EVERY == 0:
                spent = clock() - self.t0
                eta = min(spent / step * (max_new - step), max(0.0, budget_s - spent))
                print(
                    f"peer {self.label}: step {step}/{max_new} of {len(prompts)} rows, {spent:.1f}s, ETA {eta:.0f}s",
                    file=sys.stderr,
                )
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype, local_files_only=True)
    model = model.to(device).eval()  # type: ignore[arg-type]  # transformers mistypes .to (self unbound)
    width = max(map(len, prompts))
    ids = torch.zeros(len(prompts), width, dtype=torch.int64)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):  # left padding: every row's last prompt token in the last column
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    config = GenerationConfig(
        do_sample=True,
        temperature=temperature,
        top_k=0,
        top_p=1.0,
        max_new_tokens=max_new,
        min_new_tokens=max_new,
        pad_token_id=0,
        eos_token_id=None,
        cache_implementation="static",
    )
    if compile_:
        from transformers import (
            CompileConfig,  # why: as above, only the compiled peer needs it
        )

        config.compile_config = CompileConfig(fullgraph=False, mode="reduce-overhead")
    else:
        config.disable_compile = True
    model.generation_config = config

    # the same shapes (the static cache is sized by max_new_tokens), stopped after the first few steps: the
    # compilation and the CUDA graph recording of reduce-overhead happen in those
    _peer_generate(model, ids, mask, config, StoppingCriteriaList([Progress("warm-up", width, PEER_WARMUP_STEPS)]))
    config.max_time = budget_s
    out: list[torch.Tensor] = []
    timed = Progress("timed", width)
    go = functools.partial(_peer_generate, model, ids, mask, config, StoppingCriteriaList([timed]), out)
    seconds = _timed(device, go)
    done = out[0].shape[1] - width
    del model, go, out
    _release(device)
    return seconds, done, timed.times


PEER_WARMUP_STEPS = 8  # decode steps of the untimed warm-up generate (torch.compile records its graphs by then)


def _peer_generate(
    model: Any, ids: torch.Tensor, mask: torch.Tensor, config: Any, criteria: Any, out: list | None = None
) -> None:
    with torch.inference_mode():
        seqs = model.generate(ids, attention_mask=mask, generation_config=config, stopping_criteria=criteria)
    if out is not None:
        out.append(seqs)


def _timed(device: str, fn: Any) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = clock()
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return clock() - t0


def _release(device: str) -> None:
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def print_report(r: dict[str, Any]) -> None:
    print(
        f"throughput: {r['model']} on {r['device']} ({r['dtype']}, graph={r['graph']}); lengths uniform in "
        f"{r['lengths']}, temperature {r['temperature']}, EOS ignored; peer: {r['peer'] or 'none'}"
        + (f"; {r['cpu_threads']} CPU thread(s), {r['clock']} clock" if not r["on_gpu"] and "clock" in r else "")
    )
    print(
        f"{'requests':>8} {'out tokens':>10} {'engine s':>9} {'engine tok/s':>13} {'peer s':>8} "
        f"{'peer tok/s':>11} {'ratio':>7}"
    )
    for p in r["points"]:
        peer = (
            f"{p['peer_s']:>8.2f} {p['peer_tok_per_s']:>11.1f} {p['ratio']:>6.2f}x"
            if "ratio" in p
            else f"{'-':>8} {'-':>11} {'-':>7}" + (f"  peer failed: {p['peer_error']}" if "peer_error" in p else "")
        )
        print(
            f"{p['requests']:>8} {p['output_tokens']:>10} {p['engine_s']:>9.2f} {p['engine_tok_per_s']:>13.1f} {peer}"
            + ("" if p.get("peer_complete", True) else f"  (peer cut at step {p['peer_steps']})")
        )
    for p in r["points"]:
        if "rounds" in p and p["rounds"]["ratio"]:
            per = p["rounds"]["ratio"]
            print(
                f"  {p['requests']} requests over {p['rounds']['n']} rounds: the rates above are medians, the ratio "
                f"theirs; per round {min(per):.2f}-{max(per):.2f}x, {sum(x >= 1.0 for x in per)} of {len(per)} "
                f"at or above 1.00x"
            )
    for p in r["points"]:  # the headline ratio above is against the peer's steady state; this one is whole run
        if "whole_ratio" in p:
            print(
                f"  {p['requests']} requests, whole runs (prefill included on both sides): engine "
                f"{p['engine_tok_per_s']:.1f} tok/s, peer {p['peer_whole_tok_per_s']:.1f} tok/s "
                f"({p['peer_counted_tokens']} of its tokens in {p['peer_s']:.2f}s), whole-run ratio "
                f"{p['whole_ratio']:.2f}x"
            )
    for p in r["points"]:
        for label, a in p.get("arms", {}).items():
            ratio = f"{a['ratio']:.2f}x peer" if "ratio" in a else "no peer"
            print(
                f"  {p['requests']} requests, {label}: {a['engine_tok_per_s']:.1f} tok/s "
                f"[{a['tok_per_s_min']:.0f}-{a['tok_per_s_max']:.0f} over {a['runs']} runs] in {a['engine_s']:.2f}s, "
                f"{ratio}; decode {a['decode_s']:.2f}s/{a['decode_steps']} steps ({a['decode_ms_per_step']:.2f} ms), "
                f"mixed {a['mixed_s']:.2f}s/{a['mixed_steps']} steps"
            )
    for p in r["points"]:
        for label, a in (p.get("arms") or {"": p}).items():
            steps = max(1, a["decode_steps"])
            print(
                f"  {p['requests']} requests{', ' + label if label else ''}: host {a['host_ms_per_decode_step']:.2f} "
                f"ms per decode step (scheduler {1e3 * a['decode_scheduler_s'] / steps:.2f}, inputs "
                f"{1e3 * a['decode_inputs_s'] / steps:.2f}) of {a['decode_ms_per_step']:.2f}"
            )
    for p in r["points"]:  # arms whose sampled tokens are the same (same seeds): equal digests
        arms = p.get("arms") or {"": p}
        groups: dict[str, list[str]] = {}
        for label, a in arms.items():
            groups.setdefault(a["tokens"], []).append(label or "default flags")
        for digest, labels in groups.items():
            same = all(arms[x if x != "default flags" else ""]["tokens_same_every_run"] for x in labels)
            print(
                f"  {p['requests']} requests, tokens {digest}: {' == '.join(labels)}"
                f"{'' if same else ' (differ between runs of an arm)'}"
            )
    s = r["engine_stats"]
    print(
        f"engine: {s['steps']} steps ({s['decode_steps']} decode), {s['preemptions']} preemptions, "
        f"{r['num_blocks']} KV blocks"
    )
    if r["on_gpu"]:
        print(
            f"targets (>= {TARGET_TOK_PER_S} tok/s and >= {TARGET_RATIO}x): "
            f"{'met' if r['targets']['met'] else 'not met'}"
        )


def svg_plot(r: dict[str, Any], width: int = 560, height: int = 360) -> str:
    """A line chart of output tok/s against the number of requests, engine and peer, as standalone SVG."""
    series = {
        "engine": [(p["requests"], p["engine_tok_per_s"]) for p in r["points"]],
        "transformers": [(p["requests"], p["peer_tok_per_s"]) for p in r["points"] if "peer_tok_per_s" in p],
    }
    xs = [x for pts in series.values() for x, _ in pts]
    top = max(y for pts in series.values() for _, y in pts) * 1.1
    left, right, up, down = 70, 20, 30, 50

    def px(x: float) -> float:
        lo, hi = min(xs), max(xs)
        return left + (width - left - right) * ((x - lo) / (hi - lo) if hi > lo else 0.5)

    def py(y: float) -> float:
        return height - down - (height - up - down) * y / top

    out = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
            f'font-size="12"><rect width="100%" height="100%" fill="white"/>'
        ),
        f'<text x="{width / 2}" y="18" text-anchor="middle">output tok/s vs requests ({r["device"]})</text>',
        f'<line x1="{left}" y1="{py(0)}" x2="{width - right}" y2="{py(0)}" stroke="black"/>',
        f'<line x1="{left}" y1="{py(0)}" x2="{left}" y2="{up}" stroke="black"/>',
    ]
    for i in range(5):
        y = top * i / 4
        out.append(f'<text x="{left - 6}" y="{py(y) + 4}" text-anchor="end">{y:.0f}</text>')
    for x in sorted(set(xs)):
        out.append(f'<text x="{px(x)}" y="{height - down + 16}" text-anchor="middle">{x}</text>')
    out.append(f'<text x="{width / 2}" y="{height - 12}" text-anchor="middle">requests</text>')
    for (name, pts), color in zip(series.items(), ("#1f77b4", "#d62728")):
        if not pts:
            continue
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        out += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color}"/>' for x, y in pts]
        ly = up + 14 + 16 * list(series).index(name)
        out.append(f'<text x="{left + 10}" y="{ly}" fill="{color}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
