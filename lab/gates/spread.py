"""The token gate's noise: on how many prompts correct implementations' greedy ids leave transformers' `generate`.

`python -m lab gate spread --model DIR [--seeds 8] [--prompt-lens N,...] [--dtype bfloat16] [--ledger DIR]` runs,
per prompt seed, the oracle's greedy ids once, then each correct implementation's, and counts the prompts on which
each diverges:
- reference: the engine's own attention, which rounds as transformers' eager attention does (it should diverge on
  none: it is the bitwise case);
- sdpa-math: SDPA's math backend on the engine's cache (`--attn-peer sdpa-math`);
- online: the online softmax the fp32-probs setting's arms compute (fp32 statistics; lab/gates/teeth.py's base);
- online-split: the same over two KV splits (the teeth's correct twin).
Where correct implementations diverge on different numbers of prompts, a bar on that count cannot tell a bug from a
correct kernel: `gate tokens --divergence-beside-peers` reports the count, and the near-tie razor judges such an arm.
On the CPU by default; the long gate model's 16 prompts take about 2.5 minutes a seed on one core.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable
from pathlib import Path

from engine.flags import FlagSnapshot
from engine.model.config import load_config
from lab.gates import harness, peer_attention, teeth
from lab.gates.cli import parse_lens
from lab.gates.ledger import figure, write_record
from lab.gates.tokens import RAZOR_PROMPT_LENS, default_prompts, diverged, token_gate

Context = Callable[[], contextlib.AbstractContextManager[object]]
# name -> (the decode attention's peer, the patch the run holds): every one of them a correct implementation
IMPLEMENTATIONS: dict[str, tuple[str, Context]] = {
    "reference": (peer_attention.ENGINE, contextlib.nullcontext),
    "sdpa-math": ("sdpa-math", contextlib.nullcontext),
    "online": (peer_attention.ENGINE, teeth.BASES["fp32-probs"]),
    "online-split": (peer_attention.ENGINE, teeth.SEEDED["good-online-split"].patch),
}


def diverging(setup: harness.Setup, theirs: list[list[int]], peer: str, context: Context) -> int:
    """The prompts on which one implementation's greedy ids leave the oracle's."""
    setup.flags = peer_attention.flags(peer, FlagSnapshot.from_env())
    with context(), peer_attention.injected(peer, setup.device):
        ours = setup.ours()
    return diverged(token_gate(setup.prompts, ours, theirs))


def spread(
    setup: harness.Setup,
    seeds: list[int],
    lens: tuple[int, ...],
    implementations: dict[str, tuple[str, Context]],
    say: Callable[[str], None] = print,
) -> list[dict[str, int]]:
    """One row per prompt seed: the seed, then each implementation's diverging prompts."""
    vocab = load_config(setup.model_dir).vocab_size
    oracle = setup.oracle()
    rows = []
    for seed in seeds:
        t0 = time.perf_counter()
        setup.prompts = default_prompts(vocab, seed, lens)
        theirs = [oracle.greedy(p, setup.max_new_tokens) for p in setup.prompts]
        row = {"seed": seed}
        for name, (peer, context) in implementations.items():
            row[name] = diverging(setup, theirs, peer, context)
        counts = ", ".join(f"{n} {row[n]}" for n in implementations)
        say(f"seed {seed}: {counts} of {len(lens)} prompts diverge [{time.perf_counter() - t0:.0f} s]")
        rows.append(row)
    return rows


BITWISE = ("reference",)  # the implementations that round as the eager oracle does: no spread expected


def summarize(rows: list[dict[str, int]], names: list[str], prompts: int) -> tuple[str, int]:
    """Each implementation's range over the seeds, and the widest gap on one seed between two that are not bitwise
    (the spread a bar on the count would have to allow a correct kernel)."""
    ranges = ", ".join(f"{n} {min(r[n] for r in rows)}-{max(r[n] for r in rows)}" for n in names)
    spread_ = [n for n in names if n not in BITWISE]
    gap = max((max(r[n] for n in spread_) - min(r[n] for n in spread_) for r in rows), default=0)
    return (
        f"diverging prompts of {prompts} over {len(rows)} seeds: {ranges}; widest gap on one seed between correct "
        f"implementations that are not bitwise: {gap}",
        gap,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m lab gate spread", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", type=Path, required=True, help="a checkpoint directory (e.g. a gate model's)")
    p.add_argument("--seeds", type=int, default=8, help="prompt seeds, from 0 (default 8)")
    p.add_argument(
        "--prompt-lens",
        type=parse_lens,
        default=RAZOR_PROMPT_LENS,
        metavar="N,N,..",
        help="the seeded prompts' lengths (default the razor's 16; the long gate model's own: lab.ci long_prompt_lens)",
    )
    p.add_argument("--max-new-tokens", type=int, default=16, help="the token gate's (default 16)")
    p.add_argument("--dtype", default="bfloat16", choices=sorted(harness.DTYPES), help="default bfloat16")
    p.add_argument("--device", default="cpu")
    p.add_argument(
        "--only",
        nargs="+",
        choices=list(IMPLEMENTATIONS),
        metavar="NAME",
        help=f"a subset of {', '.join(IMPLEMENTATIONS)} (default all)",
    )
    p.add_argument("--ledger", type=Path, metavar="DIR", help="also write the counts as a ledger record into DIR")
    args = p.parse_args(argv)
    lens = args.prompt_lens
    if args.seeds < 1:
        p.error(f"--seeds {args.seeds}: at least 1")
    if not args.model.is_dir():
        p.error(f"--model {args.model}: not a checkpoint directory")
    names = args.only or list(IMPLEMENTATIONS)
    setup = harness.Setup(args.model, [], args.max_new_tokens, args.dtype, args.device)
    rows = spread(setup, list(range(args.seeds)), lens, {n: IMPLEMENTATIONS[n] for n in names})
    summary, gap = summarize(rows, names, len(lens))
    print(summary)
    if args.ledger:
        command = "python -m lab gate spread " + " ".join(argv if argv is not None else sys.argv[1:])
        record = write_record(
            args.ledger,
            f"token-spread-{args.model.name}-{args.dtype}",
            ["ENGINE-PERSISTENT"],
            command,
            args.device,
            summary,
            {"model": args.model.name, "prompt_lens": list(lens), "new_tokens": args.max_new_tokens, "rows": rows},
            kind="bench",
            figures=[figure("widest_gap", gap, "prompts")],
        )
        print(f"ledger: {record}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
