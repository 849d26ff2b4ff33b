"""Decode-step scaling of tensor parallelism: milliseconds per decode step of engine.LLM at
tensor_parallel_size=1 against 2 (or --sizes), on the same batch, in one run.

Each size serves --batch one-token prompts for --tokens greedy tokens (EOS ignored), so nearly every step is
a decode step of the whole batch; a step's time is the run's wall time over its steps (LLM.stats). The sizes
are interleaved for --reps rounds, rep 0 dropped; the median with its min-max band per size and the ratio of
each size's median to size 1's are printed. On the CPU (--device cpu, the default without CUDA) it runs the
embedded tiny model over gloo: a smoke test of the harness, not a number.

    python -m lab bench tp_scaling --model DIR --batch 32 --tokens 128     # 2 GPUs: the owed number
    python -m lab bench tp_scaling --device cpu --batch 2 --tokens 4 --reps 2
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from engine.llm import LLM, TINY_MODEL
from engine.sampling_params import SamplingParams
from lab.bench.stats import Band, drop_warmup


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab bench tp_scaling", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(TINY_MODEL))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--sizes", default="1,2", help="tensor_parallel_size values; the first is the baseline")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    # every size is alive at once (interleaved reps) on the same first device: each takes a bounded share
    kw = dict(max_num_seqs=args.batch, max_model_len=args.tokens + 8, gpu_memory_utilization=0.8 / len(sizes))
    llms = {n: LLM(args.model, args.dtype, args.device, tensor_parallel_size=n, **kw) for n in sizes}
    try:
        prompts = [[1 + i % 7] for i in range(args.batch)]
        params = SamplingParams(max_tokens=args.tokens, temperature=0.0, ignore_eos=True)
        samples: dict[int, list[float]] = {n: [] for n in sizes}
        for _ in range(args.reps):
            for n, llm in llms.items():
                samples[n].append(step_ms(llm, prompts, params))
        bands = {n: Band.of(drop_warmup(s)) for n, s in samples.items()}
    finally:
        for llm in llms.values():
            llm.shutdown()
    base = bands[sizes[0]].median
    print(f"model {args.model}, {args.device}, batch {args.batch}, {args.tokens} tokens, {args.reps} reps")
    for n, b in bands.items():
        print(f"tp={n}: {b.median:.3f} ms/step [{b.low:.3f}, {b.high:.3f}]  x{base / b.median:.2f} vs tp={sizes[0]}")
    return 0


def step_ms(llm: LLM, prompts: list[list[int]], params: SamplingParams) -> float:
    """Milliseconds per step of one generate call over the batch (prefix caching makes the prompts free)."""
    before = llm.stats["steps"]
    t0 = time.perf_counter()
    llm.generate(prompts, params)
    seconds = time.perf_counter() - t0
    return 1e3 * seconds / max(1, llm.stats["steps"] - before)


if __name__ == "__main__":
    sys.exit(main())
