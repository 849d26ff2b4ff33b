"""The transformers peer of the decode step at its fastest: a static KV cache, the step compiled whole
(`torch.compile(fullgraph=True)`) and captured by hand into one CUDA graph that also feeds its own next
token and position, so replaying it N times is N greedy decode steps with no host work between them.

`generate(cache_implementation="static")` refuses cudagraph trees, so the capture is done here:

    warm up the compiled step on a side stream, capture it plus `tok.copy_(next); pos.add_(1)`, replay.

Used by `python -m lab bench decode` (the `transformers compiled+graph` row); on a CPU it runs the
same step eagerly (no graphs, no compile), which the tests use.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

_WARMUPS = 3  # compiled-step calls before the capture (compilation, autotuning, lazy initialisation)


def _rewind(cache, length: int) -> None:
    """Set a static cache's fill back to `length` tokens: transformers 5 keeps it in a tensor per layer
    (`cumulative_length`) that every update advances, warm-ups included; older versions write at
    `cache_position` alone and have no such counter."""
    for layer in getattr(cache, "layers", ()):
        counter = getattr(layer, "cumulative_length", None)
        if isinstance(counter, torch.Tensor):
            counter.fill_(length)


def time_compiled_graph(
    model_dir: Path, device: str, dtype: torch.dtype, prompts: list[list[int]], steps: int, compile_step: bool = True
) -> dict:
    """Seconds per greedy decode step of transformers with a static cache, compiled and CUDA-graphed on a
    GPU, and the tokens of the first steps (for the caller to compare). prompts: equal lengths."""
    from transformers import (  # why: transformers takes seconds to import
        AutoModelForCausalLM,
        StaticCache,
    )

    if len({len(p) for p in prompts}) != 1:
        raise ValueError("the transformers peer takes prompts of one length (no padding)")
    if steps < 1:
        raise ValueError(f"steps {steps}: must be at least 1")
    ctx = len(prompts[0])
    model = AutoModelForCausalLM.from_pretrained(
        str(model_dir), dtype=dtype, attn_implementation="sdpa", local_files_only=True
    )
    model = model.to(device).eval()  # type: ignore[arg-type]  # transformers mistypes .to (self unbound)
    cache = StaticCache(config=model.config, max_cache_len=ctx + steps + _WARMUPS + 8)
    on_gpu = device == "cuda"

    def step(tok: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:  # [batch, 1] -> [batch, 1] next tokens
        logits = model(input_ids=tok, past_key_values=cache, cache_position=pos, use_cache=True).logits
        return logits[:, -1].argmax(-1, keepdim=True)

    with torch.inference_mode():
        ids = torch.tensor(prompts, device=device)
        logits = model(
            input_ids=ids, past_key_values=cache, cache_position=torch.arange(ctx, device=device), use_cache=True
        ).logits
        tok = logits[:, -1].argmax(-1, keepdim=True)
        pos = torch.tensor([ctx], device=device)
        hist = torch.zeros(len(prompts), steps + 1, dtype=torch.long, device=device)
        hist[:, :1] = tok
        fn = torch.compile(step, fullgraph=True) if compile_step and on_gpu else step
        t_compile = time.perf_counter()
        if not on_gpu:  # eager on the CPU: the same steps, a host clock
            t0 = time.perf_counter()
            for i in range(steps):
                tok = fn(tok, pos)
                hist[:, i + 1 : i + 2] = tok
                pos += 1
            return {
                "mode": "eager (no CUDA graphs here)",
                "step_s": (time.perf_counter() - t0) / steps,
                "tokens": hist.tolist(),
                "compile_s": 0.0,
            }
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # compile and warm up at position ctx (rewritten by every warm-up)
            for _ in range(_WARMUPS):
                fn(tok, pos)
                _rewind(cache, ctx)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - t_compile
        step_i = torch.zeros(1, dtype=torch.long, device=device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            nxt = fn(tok, pos)
            tok.copy_(nxt)
            pos.add_(1)
            step_i.add_(1)
            hist.index_copy_(1, step_i, nxt)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(steps):
            graph.replay()
        end.record()
        end.synchronize()
        return {
            "mode": "torch.compile(fullgraph=True), one CUDA graph per step",
            "compile_s": compile_s,
            "step_s": start.elapsed_time(end) / 1e3 / steps,
            "tokens": hist.tolist(),
        }
