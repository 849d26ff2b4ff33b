"""The engine's command line: `generate`, `gate <name>` and `bench <name>`; exit 0 pass, 1 fail, 2 usage."""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

from engine.runner import DTYPES

TINY_MODEL = Path(__file__).resolve().parent / "data" / "tiny-qwen3"
BENCHES = ("ab", "bandwidth", "decode", "launch")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    # kernels and bench hand their whole argument list (--help included) to the module they load
    if len(argv) >= 2 and argv[0] == "gate" and argv[1] == "kernels":
        return run_module("engine.gates.kernels", argv[2:])
    if argv[:1] == ["bench"] or argv[:2] == ["gate", "bench"]:
        rest = argv[1:] if argv[0] == "bench" else argv[2:]
        if not rest or rest[0] not in BENCHES:
            parser.parse_args(["bench", "--help"] if not rest or rest[0] in ("-h", "--help") else ["bench", *rest])
            return 2
        return run_module(f"engine.bench.{rest[0]}", rest[1:])
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
    from engine.gates.cli import add_gate_parser

    parser = argparse.ArgumentParser(prog="python -m engine", description="rowgate's reference LLM-decode engine.")
    sub = parser.add_subparsers(dest="command")
    gen = sub.add_parser("generate", help="greedy generation with the engine",
                         description="Greedy generation; with no --model, the embedded tiny Qwen3.")
    add_model_args(gen)
    gen.add_argument("--prompt-ids", action="append", default=[], metavar="1,2,3",
                     help="comma-separated token ids of one prompt; repeat for a batch")
    gen.add_argument("--prompt", action="append", default=[], metavar="TEXT",
                     help="a text prompt (needs a tokenizer in the model directory); repeat for a batch")
    gen.add_argument("--max-new-tokens", type=int, default=16)
    gen.add_argument("--batch", type=int, default=1, help="run the single given prompt N times as one batch")
    gen.add_argument("--json", action="store_true", help='print {"tokens": [[...], ...], "tok_per_s": ...}')
    gen.set_defaults(handler=cmd_generate)
    add_gate_parser(sub)
    bench = sub.add_parser("bench", help="benchmarks: " + ", ".join(BENCHES),
                           description="Run a benchmark module's main(argv): python -m engine bench NAME [ARGS]")
    bench.add_argument("name", choices=BENCHES)
    return parser


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=Path, default=TINY_MODEL,
                   help="Hugging Face model directory (default: the embedded tiny Qwen3)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")


def parse_ids(text: str) -> list[int]:
    try:
        ids = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise ValueError(f"--prompt-ids {text!r}: expected comma-separated integers") from None
    if not ids:
        raise ValueError(f"--prompt-ids {text!r}: no ids")
    return ids


def cmd_generate(args: argparse.Namespace) -> int:
    from engine.runner import Runner

    prompts = [parse_ids(t) for t in args.prompt_ids]
    tokenizer = None
    if args.prompt:
        tokenizer = load_tokenizer(args.model)
        prompts += [tokenizer.encode(t) for t in args.prompt]
    if not prompts:
        prompts = [[1, 2, 3]]
    if args.batch < 1:
        raise ValueError(f"--batch {args.batch}: must be at least 1")
    if args.batch > 1:
        if len(prompts) != 1:
            raise ValueError("--batch N repeats one prompt; with several prompts, the batch is the prompts")
        prompts = prompts * args.batch
    longest = max(len(p) for p in prompts) + args.max_new_tokens
    runner = Runner(args.model, DTYPES[args.dtype], args.device, max_batch=len(prompts), max_model_len=longest)
    result = runner.generate(prompts, args.max_new_tokens)
    if args.json:
        print(json.dumps({"tokens": result.tokens, "tok_per_s": round(result.tok_per_s, 2)}))
        return 0
    for i, toks in enumerate(result.tokens):
        text = f"  {tokenizer.decode(toks)!r}" if tokenizer is not None else ""
        print(f"[{i}] {','.join(map(str, toks))}{text}")
    print(f"{sum(map(len, result.tokens))} tokens, {result.tok_per_s:.1f} tok/s")
    return 0


def load_tokenizer(model_dir: Path):  # -> a transformers tokenizer
    # checked first: transformers 5 otherwise builds an empty tokenizer from the config's model_type
    if not any((Path(model_dir) / f).is_file() for f in TOKENIZER_FILES):
        raise ValueError(f"--prompt needs a tokenizer in {model_dir} (one of {', '.join(TOKENIZER_FILES)}); "
                         "pass --prompt-ids instead")
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise ValueError("--prompt needs transformers for the tokenizer; pass --prompt-ids instead") from None
    try:
        return AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    except Exception as exc:  # transformers raises several types for a missing tokenizer
        raise ValueError(f"--prompt: the tokenizer in {model_dir} does not load ({exc.__class__.__name__}: "
                         f"{str(exc)[:200]}); pass --prompt-ids instead") from None


def run_module(name: str, argv: list[str]) -> int:
    """Import an optional module lazily and hand it argv; a missing module is a clear error."""
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            print(f"error: {name} is not available in this installation ({exc})", file=sys.stderr)
            return 2
        raise
    return int(module.main(argv) or 0)
