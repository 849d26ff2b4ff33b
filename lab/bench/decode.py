"""Whole decode step against the weight-streaming floor, and tokens per second against transformers.

Builds a model of the given shape with random weights (default: Qwen3-0.6B's), prefills one prompt
of --context tokens, then times --steps greedy decode steps (CUDA-graph replay unless VT_EAGER=1).
The floor of one decode step at batch 1 is reading every weight once: weight bytes over the copy
bandwidth measured in the same run. transformers' own `generate` on the same weights gives the peer.

    python -m lab bench decode [--context 1024] [--steps 64] [--batch 1] [--tiny] [--profile] [--hf-compiled]

--batch B decodes B sequences of the same context at once; the floor is then every weight plus the K/V of
every sequence read once. --hf-compiled adds the fastest transformers peer: a static cache, the step under
`torch.compile(fullgraph=True)`, captured by hand into a CUDA graph (lab/bench/hf_peer.py), timed in
the same run; --no-oracle still skips the slower `generate` peer.

--profile then runs a few more steps of the same batch under torch.profiler (lab/bench/profile.py) and
prints, and records, what limits the step: kernels per step, device time per step against the timed
step, and the top kernels by time with their count per step and share (aten ops and their self time on
a CPU). On a GPU it adds the device timeline's critical path: each kernel group's time past the end of all
work that started before it (so a dependent launch's wait on its predecessor is not its own), and the
time no kernel ran; those add up to the span, where the kernels' own times overlap past it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from engine.llm import LLM
from engine.model.config import load_config
from lab.bench.bandwidth import copy_bandwidth
from lab.bench.figures import decode_figures
from lab.bench.hf_peer import time_compiled_graph
from lab.bench.profile import profile_decode, render
from lab.bench.step_workload import QWEN3_0_6B, TINY, save_random_model
from lab.bench.timing import clocks, device_name, gpu_device
from lab.drive import greedy, greedy_llm
from lab.gates.ledger import write_record
from lab.gates.oracle import Oracle


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m lab bench decode", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--context", type=int, default=1024, help="prompt length before decoding (default 1024)")
    p.add_argument("--steps", type=int, default=64, help="decode steps timed (default 64)")
    p.add_argument("--tiny", action="store_true", help="a tiny model of the same architecture (CPU smoke run)")
    p.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda when available")
    p.add_argument("--batch", type=int, default=1, help="sequences decoded at once (default 1)")
    p.add_argument("--no-oracle", action="store_true", help="skip transformers' generate")
    p.add_argument(
        "--hf-compiled",
        action="store_true",
        help="also time transformers with a static cache, torch.compile(fullgraph=True) and a CUDA graph",
    )
    p.add_argument("--ledger", type=Path, metavar="DIR", help="write the ledger record into DIR")
    p.add_argument(
        "--allow-dirty",
        action="store_true",
        help="write the ledger record from a tree that differs from HEAD (recorded as dirty)",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="after the timing, profile a few decode steps: kernels per step and the top kernels by time",
    )
    p.add_argument("--profile-steps", type=int, default=5, metavar="N", help="decode steps profiled (default 5)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.profile_steps < 1:
        print(f"error: --profile-steps {args.profile_steps}: must be at least 1", file=sys.stderr)
        return 2
    if args.batch < 1 or args.steps < 1 or args.context < 1:
        print("error: --batch, --steps and --context must be at least 1", file=sys.stderr)
        return 2
    device = gpu_device(args.device, "bench decode", "the Python host path and the reference ops, not the GPU step")
    if device is None:
        return 2
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = save_random_model(Path(tmp), TINY if args.tiny else QWEN3_0_6B)
        record = measure(
            model_dir,
            device,
            dtype,
            args.context,
            args.steps,
            not args.no_oracle,
            args.profile_steps if args.profile else 0,
            args.batch,
            args.hf_compiled,
        )
    print_report(record)
    if "profile" in record:
        print()
        print(render(record["profile"], record["step_ms"]))
    if args.ledger:
        cmd = "python -m lab bench decode " + " ".join(argv if argv is not None else sys.argv[1:])
        summary = (
            f"decode step at batch {record['batch']} {record['step_ms']:.3f} ms; floor fraction "
            f"{record.get('floor_fraction', 0):.0%}"
        )
        if "ratio_vs_transformers" in record:
            summary += f"; tok/s vs transformers generate {record['ratio_vs_transformers']:.2f}x"
        if "hf_compiled_step_ms" in record:
            summary += (
                f"; transformers compiled+graph {record['hf_compiled_step_ms']:.3f} ms "
                f"(engine {record['ratio_vs_hf_compiled']:.2f}x)"
            )
        if "profile" in record:
            prof = record["profile"]
            summary += (
                f"; profile ({prof['mode'].split(' (')[0]}): {prof['kernels_per_step']:.0f} {prof['unit']}s "
                f"and {prof['device_ms_per_step']:.3f} ms per step"
            )
        slug = "decode-step-profile" if args.profile else "decode-step"
        rows = ["ENGINE-BENCH", "ENGINE-GRAPH"] + (["ENGINE-PERF"] if args.hf_compiled or args.batch > 1 else [])
        path = write_record(
            args.ledger,
            slug,
            rows,
            cmd,
            record["device"],
            summary,
            record,
            kind="bench",
            figures=decode_figures(record),
            allow_dirty=args.allow_dirty,
        )
        print(f"ledger: {path}")
    return 0


def measure(
    model_dir: Path,
    device: str,
    dtype: torch.dtype,
    context: int,
    steps: int,
    oracle: bool,
    profile_steps: int = 0,
    batch: int = 1,
    hf_compiled: bool = False,
) -> dict:
    # a profile runs 2 warm-up steps and profile_steps per phase (graph, eager) on the batch's sequences
    g = torch.Generator().manual_seed(1)
    vocab = load_config(model_dir).vocab_size
    prompts = [torch.randint(0, vocab, (context,), generator=g).tolist() for _ in range(batch)]
    prompt = prompts[0]
    llm = greedy_llm(model_dir, dtype, device, prompts, max(steps, 2 * profile_steps + 3) + 8, block_size=32)
    runner = llm.runner
    warm = greedy(llm, prompts, 4)  # warm-up: module load, kernel builds, graph capture
    step_s = _time_decode(llm, prompts, steps, device)
    weight_bytes = sum(p.numel() * p.element_size() for p in runner.model.parameters())
    c = runner.config
    kv_bytes = (
        2
        * c.num_hidden_layers
        * batch
        * context
        * c.num_key_value_heads
        * c.head_dim
        * torch.empty((), dtype=dtype).element_size()
    )
    # the embedding row lookup reads one row, but a tied lm_head reads the whole matrix once per step
    record: dict[str, Any] = {
        "device": device_name(torch.device(device)),
        "dtype": str(dtype).removeprefix("torch."),
        "context": context,
        "steps": steps,
        "batch": batch,
        "graph": runner.use_graph,
        "weight_bytes": weight_bytes,
        "kv_bytes": kv_bytes,
        "step_ms": step_s * 1e3,
        "engine_tok_per_s": batch / step_s,
        "clocks": clocks(),
    }
    if device == "cuda":
        ceiling = copy_bandwidth(torch.device(device), 6)
        floor_s = (weight_bytes + (kv_bytes if batch > 1 else 0)) / ceiling  # batch 1: the weights alone
        record.update(
            copy_bytes_per_s=ceiling,
            floor_ms=floor_s * 1e3,
            floor_fraction=floor_s / step_s,
            floor_counts="weights" if batch == 1 else "weights + the K/V once",
        )
    if hf_compiled:
        try:
            hf = time_compiled_graph(model_dir, device, dtype, prompts, steps)
        except Exception as exc:  # noqa: BLE001 - a peer that cannot run is reported, not fatal
            record["hf_compiled_unavailable"] = (
                f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            )
        else:
            agree = sum(a[:4] == b[:4] for a, b in zip(warm, hf["tokens"]))  # sequences, not asserted
            record.update(
                hf_compiled_mode=hf["mode"],
                hf_compiled_compile_s=hf["compile_s"],
                hf_compiled_step_ms=hf["step_s"] * 1e3,
                ratio_vs_hf_compiled=hf["step_s"] / step_s,
                hf_compiled_first4_agree=agree,
            )
    if oracle and batch == 1:  # generate decodes one prompt here
        hf_s = _time_transformers(model_dir, device, dtype, prompt, steps)
        record.update(transformers_tok_per_s=steps / hf_s, ratio_vs_transformers=(1 / step_s) / (steps / hf_s))
    if profile_steps:
        record["profile"] = profile_decode(runner, prompts, profile_steps)
        record["profile"]["busy_fraction"] = record["profile"]["device_ms_per_step"] / record["step_ms"]
    return record


def _time_decode(llm: LLM, prompts: list[list[int]], steps: int, device: str) -> float:
    """Seconds per decode step: generate(steps+1) minus generate(1) isolates the decode steps."""

    def run(n: int) -> float:
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        greedy(llm, prompts, n)
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    one = min(run(1) for _ in range(3))
    full = min(run(steps + 1) for _ in range(3))
    return max(full - one, 1e-9) / steps


def _time_transformers(model_dir: Path, device: str, dtype: torch.dtype, prompt: list[int], steps: int) -> float:
    oracle = Oracle(model_dir, dtype=dtype, device=device)
    oracle.greedy(prompt, 2)

    def run(n: int) -> float:
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        oracle.greedy(prompt, n)
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    return max(min(run(steps + 1) for _ in range(2)) - min(run(1) for _ in range(2)), 1e-9)


def print_report(r: dict) -> None:
    print(
        f"decode step at batch {r.get('batch', 1)}, context {r['context']} ({r['device']}, {r['dtype']}, "
        f"graph={r['graph']})"
    )
    print(f"{'measure':<28} {'value':>14}")
    print(f"{'weights read per step':<28} {r['weight_bytes'] / 1e6:>11.1f} MB")
    if r.get("batch", 1) > 1:
        print(f"{'K/V read per step':<28} {r['kv_bytes'] / 1e6:>11.1f} MB")
    print(f"{'engine step':<28} {r['step_ms']:>11.3f} ms")
    if "floor_ms" in r:
        print(f"{'copy bandwidth':<28} {r['copy_bytes_per_s'] / 1e12:>10.3f} TB/s")
        print(f"{'floor (' + r.get('floor_counts', 'weights') + ')':<28} {r['floor_ms']:>11.3f} ms")
        print(f"{'fraction of floor':<28} {r['floor_fraction']:>13.1%}")
    if "hf_compiled_step_ms" in r:
        print(f"{'transformers compiled+graph':<28} {r['hf_compiled_step_ms']:>11.3f} ms")
        print(f"{'engine / that peer':<28} {r['ratio_vs_hf_compiled']:>13.2f}x")
        print(f"{'  (compile + warm-up)':<28} {r['hf_compiled_compile_s']:>12.1f} s")
        if r.get("hf_compiled_first4_agree") is not None:
            print(f"{'  first 4 tokens = engine':<28} {r['hf_compiled_first4_agree']:>10} of {r.get('batch', 1)}")
    elif "hf_compiled_unavailable" in r:
        print(f"{'transformers compiled+graph':<28} unavailable: {r['hf_compiled_unavailable']}")
    print(f"{'engine tok/s':<28} {r['engine_tok_per_s']:>14.1f}")
    if "transformers_tok_per_s" in r:
        print(f"{'transformers tok/s':<28} {r['transformers_tok_per_s']:>14.1f}")
        print(f"{'engine / transformers':<28} {r['ratio_vs_transformers']:>13.2f}x")
