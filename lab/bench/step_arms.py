"""The decode step with a set of flags on against the defaults: the same greedy tokens, and the arms that ran.

A Qwen3-0.6B-shaped model with random weights (fewer layers with --layers), --batch prompts of --context tokens,
--steps greedy tokens decoded by two Runners in one process (CUDA-graph decode unless VT_EAGER=1): one with the
defaults, one with --flags set. Prints whether every token agrees, the kernel arms the flagged run ran (the table's
counters, reset before it) and, per flag set on, the calls of its arms. Exit 1 when a token differs or a required flag
(--require; default every flag set on) ran no arm of its own (a passing comparison that never ran the arm proves
nothing).

    python -m lab bench step_arms --flags VT_QKV_ROPE_STORE=1,VT_NORM_GEMV=1 [--batch 1] [--context 1024]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

from engine import flags, kernels
from engine.flags import FlagSnapshot
from lab.bench.step_workload import QWEN3_0_6B, TINY, save_random_model
from lab.drive import greedy, greedy_llm


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m lab bench step_arms",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--flags", required=True, help="comma-separated VT_X=VALUE settings of the flagged run")
    p.add_argument(
        "--require",
        help="comma-separated flags whose arms must run (default: every flag --flags sets on); at batch 32 the GEMV "
        "arms (at most 8 rows) cannot",
    )
    p.add_argument("--batch", type=int, default=1, help="sequences decoded at once (default 1)")
    p.add_argument("--context", type=int, default=1024, help="prompt length (default 1024)")
    p.add_argument("--steps", type=int, default=16, help="greedy tokens per sequence (default 16)")
    p.add_argument("--layers", type=int, default=28, help="decoder layers (default 28, Qwen3-0.6B's)")
    p.add_argument("--tiny", action="store_true", help="a tiny model of the same architecture (CPU smoke run)")
    return p


def parse_settings(text: str) -> dict[str, bool | str]:
    """`VT_A=1,VT_B=0` as flag values; an unknown flag or a bad value is an error naming it."""
    out: dict[str, bool | str] = {}
    for part in filter(None, text.split(",")):
        name, sep, raw = part.partition("=")
        if not sep or name not in flags.FLAGS:
            raise ValueError(f"--flags {part!r}: expected VT_NAME=VALUE with a flag declared in engine/flags.py")
        out[name] = flags.parse(name, raw)
    return out


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = parse_settings(args.flags)
        required = [n for n, v in settings.items() if v is True] if args.require is None else args.require.split(",")
        unknown = [n for n in required if n not in settings or settings[n] is not True]
        if unknown:
            raise ValueError(f"--require {','.join(unknown)}: not set on by --flags")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if min(args.batch, args.context, args.steps, args.layers) < 1:
        print("error: --batch, --context, --steps and --layers must be at least 1", file=sys.stderr)
        return 2
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    base = FlagSnapshot.from_env()
    flagged = base.with_(**settings)
    shape = TINY if args.tiny else dict(QWEN3_0_6B, num_hidden_layers=args.layers)
    g = torch.Generator().manual_seed(3)
    with tempfile.TemporaryDirectory(prefix="vt-step-arms-") as tmp:
        model_dir = save_random_model(Path(tmp), shape)
        vocab = int(shape["vocab_size"])
        prompts = [torch.randint(0, vocab, (args.context,), generator=g).tolist() for _ in range(args.batch)]
        tokens = {}
        seen = kernels.counts()
        for name, snap in (("defaults", base), ("flagged", flagged)):
            llm = greedy_llm(model_dir, dtype, device, prompts, args.steps + 8, flags=snap, block_size=32)
            kernels.reset_counts()
            tokens[name] = greedy(llm, prompts, args.steps)
            seen = kernels.counts()
            del llm
    same = sum(a == b for a, b in zip(tokens["defaults"], tokens["flagged"]))
    print(f"step-arms: batch {args.batch}, context {args.context}, {args.steps} tokens, flags {args.flags}")
    print(f"tokens equal: {same} of {args.batch} sequences")
    print(kernels.render_counts(seen))
    missing = []
    for name, value in settings.items():
        if value is True:
            ran = kernels.arms_ran(name, seen)
            print(f"arms of {name}: {ran} calls" + ("" if name in required else " (not required)"))
            if ran == 0 and name in required:
                missing.append(name)
    ok = same == args.batch and not missing
    print(f"step-arms: {'PASS' if ok else 'FAIL'}" + (f" (no arm ran: {', '.join(missing)})" if missing else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
