"""`python -m engine serve [MODEL] --host H --port N`: the OpenAI-compatible server on uvicorn."""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.cli_args import TINY_MODEL
from engine.runner import DTYPES


def add_serve_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="serve the OpenAI API (/v1/completions, /v1/chat/completions, /metrics)",
        description="An OpenAI-compatible HTTP server over engine.LLM (FastAPI on uvicorn, streaming by SSE).",
    )
    p.add_argument("model", nargs="?", type=Path, default=TINY_MODEL, help="model directory (default: the tiny Qwen3)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--served-model-name", default=None, help="the model id clients name (default: the directory's name)"
    )
    p.add_argument("--dtype", choices=["auto", *sorted(DTYPES)], default="auto")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: CUDA when available")
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument("--kv-cache-memory", type=int, default=None, help="bytes for the KV cache (default: see engine.LLM)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--tensor-parallel-size", type=int, default=1, help="ranks to split the model over (one process each)"
    )
    p.set_defaults(handler=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn  # why: the server's optional dependency, only `serve` needs it
    except ImportError as exc:
        raise ValueError("serve needs fastapi and uvicorn: pip install 'rowgate[engine]'") from exc
    from engine.llm import LLM  # why: torch loads only for a command that runs the model
    from engine.serve.app import build_app  # why: fastapi loads only for `serve`

    llm = LLM(
        args.model,
        args.dtype,
        args.device,
        max_num_seqs=args.max_num_seqs,
        max_model_len=args.max_model_len,
        seed=args.seed,
        kv_cache_memory=args.kv_cache_memory,
        tensor_parallel_size=args.tensor_parallel_size,
    )
    app = build_app(llm, args.served_model_name or Path(args.model).name)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    finally:
        llm.shutdown()
    return 0
