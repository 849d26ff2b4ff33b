"""Numerics cases for greedy argmax and top-k/top-p sampling (engine/cuda/sample.cu) against engine.ops.sample.

Argmax is compared bitwise (indices as fp32, exact below 2**24). Sampling draws from its own counter-based
stream, so its cases compare laws: the share of draws inside the reference's kept set (must be 1), and the
draw frequencies against the reference's renormalized softmax.
"""

from __future__ import annotations

from functools import partial

import torch

from engine.cuda import sample
from engine.ops import sample as ref
from lab.gates.cases import Inputs, KernelCase

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
VOCABS = (1, 2047, 2048, 2049, 32_000, 151_936)  # around the 2048-logit chunk of pass 1, and real vocabularies
SUPPORT_SEEDS = 8
FREQ_DRAWS = 200_000  # the frequency's standard deviation stays under 0.0012
FREQ_LOGITS = (1.0, 0.2, -0.5, 2.0, 0.0, 1.5, -2.0, 0.7)
SETTINGS = ((0, 1.0, 1.0), (40, 1.0, 0.7), (0, 0.9, 1.0), (50, 0.8, 1.3))  # (top_k, top_p, temperature)


def kept_set(logits: torch.Tensor, top_k: int, top_p: float, temperature: float) -> torch.Tensor:
    """[batch, vocab] bool: the tokens the reference may draw (top-k then top-p, ties at either cut kept), fp64."""
    x = logits.double() / temperature
    keep = torch.ones_like(x, dtype=torch.bool)
    if 0 < top_k < x.shape[1]:
        keep &= x >= torch.topk(x, top_k, dim=1).values[:, -1:]
    if top_p < 1.0:
        probs = torch.softmax(x.masked_fill(~keep, float("-inf")), dim=1)
        ordered = torch.sort(probs, dim=1, descending=True).values
        cut = (torch.cumsum(ordered, dim=1) >= top_p).int().argmax(dim=1, keepdim=True)
        keep &= probs >= ordered.gather(1, cut)
    return keep


def argmax_inputs(seed: int, device: torch.device, *, dtype: torch.dtype, vocab: int) -> Inputs:
    """Random rows plus planted ties across chunks, NaNs, infinities and signed zeros."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(6, vocab, generator=g)
    picks = torch.randint(0, vocab, (6, 3), generator=g)
    logits[0, picks[0]] = 9.0  # a three-way tie: the lowest index wins
    logits[1, picks[1]] = float("nan")  # the first NaN wins
    logits[2] = float("-inf")
    logits[3] = 0.0
    logits[3, picks[3, 0]] = -0.0
    logits[4, picks[4]] = float("inf")
    return {"logits": logits.to(dtype).to(device)}


def run_argmax(x: Inputs) -> torch.Tensor:
    return sample.greedy_argmax(x["logits"]).float()


def ref_argmax(x: Inputs) -> torch.Tensor:
    return ref.greedy_argmax(x["logits"]).float()


def sample_inputs(seed: int, device: torch.device, *, dtype: torch.dtype, vocab: int, setting: tuple) -> Inputs:
    g = torch.Generator().manual_seed(seed)
    return {"logits": (torch.randn(16, vocab, generator=g) * 3).to(dtype).to(device), "setting": setting, "seed": seed}


def run_support(x: Inputs) -> torch.Tensor:  # [seeds, batch]: 1 where the draw is in the reference's kept set
    logits, (k, p, t) = x["logits"], x["setting"]
    loose = kept_set(logits.float(), k, min(1.0, p + 1e-3) if p < 1.0 else p, t)  # fixed-point mass at a near-tie
    rows = torch.arange(logits.shape[0], device=logits.device)
    draws = [sample.sample_top_k_top_p(logits, k, p, t, x["seed"] * SUPPORT_SEEDS + s) for s in range(SUPPORT_SEEDS)]
    return torch.stack([loose[rows, d].float() for d in draws])


def ref_support(x: Inputs) -> torch.Tensor:
    return torch.ones(SUPPORT_SEEDS, x["logits"].shape[0], device=x["logits"].device)


def freq_inputs(seed: int, device: torch.device, *, setting: tuple) -> Inputs:
    return {"logits": torch.tensor(FREQ_LOGITS, device=device), "setting": setting, "seed": seed}


def run_freq(x: Inputs) -> torch.Tensor:  # [vocab]: the share of FREQ_DRAWS independent draws per token
    (k, p, t), logits = x["setting"], x["logits"]
    draws = sample.sample_top_k_top_p(logits.expand(FREQ_DRAWS, -1), k, p, t, x["seed"])
    return torch.bincount(draws, minlength=logits.numel()).float() / FREQ_DRAWS


def ref_freq(x: Inputs) -> torch.Tensor:
    (k, p, t), logits = x["setting"], x["logits"]
    keep = kept_set(logits[None], k, p, t)[0]
    return torch.softmax((logits.double() / t).masked_fill(~keep, float("-inf")), dim=0).float()


def build_cases() -> list[KernelCase]:
    cases = []
    for dt, dtype in DTYPES.items():
        for vocab in VOCABS:
            cases.append(
                KernelCase(
                    f"sample/argmax/{dt}/v{vocab}",
                    "argmax",
                    "VT_ARGMAX_KERNEL",
                    torch.float32,
                    partial(argmax_inputs, dtype=dtype, vocab=vocab),
                    run_argmax,
                    ref_argmax,
                    "exact",
                    "KERNEL-SAMPLE",
                    ("small",) if vocab == 2049 else (),
                )
            )
        for k, p, t in SETTINGS:
            make = partial(sample_inputs, dtype=dtype, vocab=32_000, setting=(k, p, t))
            cases.append(
                KernelCase(
                    f"sample/top_k_top_p-support/{dt}/v32000/k{k}/p{p}/t{t}",
                    "top_k_top_p",
                    "VT_SAMPLE_KERNEL",
                    torch.float32,
                    make,
                    run_support,
                    ref_support,
                    "exact",
                    "KERNEL-SAMPLE",
                    ("small",) if (dt, k) == ("bf16", 50) else (),
                )
            )
    for k, p, t in ((0, 1.0, 0.9), (3, 1.0, 0.9), (0, 0.8, 0.9)):
        cases.append(
            KernelCase(
                f"sample/top_k_top_p-frequency/fp32/v8/k{k}/p{p}/t{t}",
                "top_k_top_p",
                "VT_SAMPLE_KERNEL",
                torch.float32,
                partial(freq_inputs, setting=(k, p, t)),
                run_freq,
                ref_freq,
                "bf16",
                "KERNEL-SAMPLE",
            )
        )
    return cases


CASES = build_cases()
