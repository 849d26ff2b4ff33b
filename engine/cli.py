"""The engine's command line: `generate` and `serve`; exit 0 done, 2 usage. The gates and benchmarks are `python -m lab`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from engine.cli_args import TINY_MODEL, add_model_args, parse_ids
from engine.llm import LLM, load_tokenizer
from engine.sampling_params import SamplingParams
from engine.serve.cli import add_serve_parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return args.handler(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engine", description="rowgate's reference LLM-decode engine.")
    sub = parser.add_subparsers(dest="command")
    gen = sub.add_parser(
        "generate",
        help="generate with the engine (engine.LLM)",
        description="Generate through engine.LLM (scheduler, paged cache, sampling); greedy by "
        "default; with no --model, the embedded tiny Qwen3 and its tokenizer.",
    )
    add_model_args(gen)
    gen.add_argument(
        "--prompt-ids",
        action="append",
        default=[],
        metavar="1,2,3",
        help="comma-separated token ids of one prompt; repeat for a batch",
    )
    gen.add_argument(
        "--prompt",
        action="append",
        default=[],
        metavar="TEXT",
        help="a text prompt (needs tokenizer.json in the model directory); repeat for a batch",
    )
    gen.add_argument(
        "--max-tokens",
        "--max-new-tokens",
        dest="max_tokens",
        type=int,
        default=16,
        help="new tokens per prompt at most (default 16); EOS or a stop token ends one earlier",
    )
    gen.add_argument("--temperature", type=float, default=0.0, help="0 (the default) is greedy")
    gen.add_argument("--top-p", type=float, default=1.0, help="nucleus mass in (0, 1] (default 1: off)")
    gen.add_argument("--top-k", type=int, default=-1, help="most probable tokens kept (default -1: off)")
    gen.add_argument("--seed", type=int, default=None, help="the requests' seed (default: the engine's generator)")
    gen.add_argument("--ignore-eos", action="store_true", help="keep going past the model's EOS")
    gen.add_argument("--batch", type=int, default=1, help="run the single given prompt N times as one batch")
    gen.add_argument(
        "--tensor-parallel-size", type=int, default=1, help="ranks to split the model over (one process each)"
    )
    gen.add_argument(
        "--json",
        action="store_true",
        help='print {"tokens": [[...]], "texts": [...], "finish_reasons": [...], "tok_per_s": ...}',
    )
    gen.set_defaults(handler=cmd_generate)
    add_serve_parser(sub)
    return parser


def cmd_generate(args: argparse.Namespace) -> int:
    prompts = [parse_ids(t) for t in args.prompt_ids]
    is_text = [False] * len(prompts)
    if args.prompt:
        if not (Path(args.model) / "tokenizer.json").is_file():
            raise ValueError(f"--prompt needs a tokenizer in {args.model} (tokenizer.json); pass --prompt-ids instead")
        tokenizer = load_tokenizer(Path(args.model))
        prompts += [tokenizer.encode(t).ids for t in args.prompt]
        is_text += [True] * len(args.prompt)
    if not prompts:
        prompts, is_text = [[1, 2, 3]], [False]
    if args.batch < 1:
        raise ValueError(f"--batch {args.batch}: must be at least 1")
    if args.batch > 1:
        if len(prompts) != 1:
            raise ValueError("--batch N repeats one prompt; with several prompts, the batch is the prompts")
        prompts, is_text = prompts * args.batch, is_text * args.batch
    params = SamplingParams(
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        max_tokens=args.max_tokens,
        seed=args.seed,
        ignore_eos=args.ignore_eos,
    )
    longest = max(len(p) for p in prompts) + args.max_tokens
    limit = _max_positions(Path(args.model))
    if limit is not None and longest + 1 > limit:  # named in the user's terms: the CLI sets max_model_len itself
        room = limit - 1 - max(len(p) for p in prompts)
        raise ValueError(
            f"a {max(len(p) for p in prompts)}-token prompt and --max-tokens {args.max_tokens} need "
            f"{longest + 1} positions; the model has {limit} (max_position_embeddings)"
            + (f": pass --max-tokens {room} or fewer" if room > 0 else ": the prompt alone fills them")
        )
    block = 16
    llm = LLM(
        args.model,
        args.dtype,
        args.device,
        max_num_seqs=len(prompts),
        max_model_len=longest + 1,
        block_size=block,
        num_blocks=len(prompts) * -(-(longest + 1) // block),
        tensor_parallel_size=args.tensor_parallel_size,
    )
    start = time.perf_counter()
    try:
        outs = llm.generate(prompts, params)
        seconds = time.perf_counter() - start
    finally:
        llm.shutdown()
    total = sum(len(o.token_ids) for o in outs)
    rate = total / seconds if seconds > 0 else float("inf")
    if args.json:
        print(
            json.dumps(
                {
                    "tokens": [o.token_ids for o in outs],
                    "texts": [o.text for o in outs],
                    "finish_reasons": [o.finish_reason for o in outs],
                    "tok_per_s": round(rate, 2),
                }
            )
        )
        return 0
    if Path(args.model).resolve() == Path(TINY_MODEL).resolve():
        print("model: the embedded tiny Qwen3, a toy with random weights: its text is not language")
    for i, o in enumerate(outs):
        text = f"  {o.text!r}" if o.text is not None else ""  # a token-id prompt's output decodes too
        print(f"[{i}] {','.join(map(str, o.token_ids))}{text}  (finish: {o.finish_reason})")
    print(f"{total} tokens, {rate:.1f} tok/s")
    return 0


def _max_positions(model: Path) -> int | None:
    """The checkpoint's max_position_embeddings, or None (LLM() reports a missing or broken config)."""
    try:
        value = json.loads((model / "config.json").read_text()).get("max_position_embeddings")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) else None
