"""Per-request sampling on the device in torch ops only, so it runs inside a captured decode step.

Each row draws from softmax(logits / T) restricted to its top-k set and then its top-p nucleus (the
reference's sets, `engine.ops.sample`), by the Gumbel-max rule: argmax(logits / T + G) with G a
standard Gumbel variable per token. G comes from a counter-based hash of (the request's seed, the
index of the token being generated, the vocabulary index): no generator state, so a request's draw
depends on nothing else in the batch, and a request recomputed after preemption draws the same tokens.
Rows with temperature 0 take greedy_argmax of the unscaled logits: exactly greedy.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import torch

from engine import kernels, penalties
from engine.flags import FlagSnapshot
from engine.logprobs import device_logprobs, graph_width
from engine.ops.sample import gumbel

__all__ = ["Mode", "SamplingInputs", "StepExtras", "gumbel", "sample", "sample_with_extras", "seed_bits"]


class Mode(str, Enum):
    """What a batch needs: one captured graph per (padded batch size, mode)."""

    GREEDY = "greedy"  # every row has temperature 0
    RANDOM = "random"  # some row samples; no row restricts top-k or top-p
    FILTERED = "filtered"  # some row samples with top-k < vocab or top-p < 1


def sample(
    flags: FlagSnapshot,  # the caller's (a Runner's) snapshot: the argmax arm comes from the kernel table
    logits: torch.Tensor,  # [batch, vocab], any float dtype
    temperature: torch.Tensor,  # [batch] float32, >= 0 (0: greedy)
    top_k: torch.Tensor,  # [batch] int64, <= 0 or >= vocab: off
    top_p: torch.Tensor,  # [batch] float32 in (0, 1]
    seeds: torch.Tensor,  # [batch] int64
    steps: torch.Tensor,  # [batch] int64: index of the token being generated within its request
    mode: Mode = Mode.FILTERED,
) -> torch.Tensor:  # [batch] int64
    """One token per row through the table's greedy_argmax and sample_rows ops; no host reads, so it can be
    captured (every input a device tensor)."""
    greedy = kernels.greedy_argmax(flags, logits)
    if mode is Mode.GREEDY:
        return greedy
    drawn = kernels.sample_rows(flags, logits, temperature, top_k, top_p, seeds, steps, mode is Mode.FILTERED)
    return torch.where(temperature > 0, drawn, greedy)


def seed_bits(seed: int) -> int:
    """Any Python int as the signed int64 with the same low 64 bits."""
    bits = seed % (1 << 64)
    return bits - (1 << 64) if bits >= 1 << 63 else bits


class SamplingInputs:
    """The sampler's per-row inputs for one padded batch: host staging and the device tensors a graph reads.

    Padding rows are greedy (temperature 0) and their tokens are ignored.
    """

    def __init__(self, padded: int, device: torch.device) -> None:
        self.padded = padded
        pin = device.type == "cuda"
        self.host_f = torch.zeros(2 * padded, dtype=torch.float32, pin_memory=pin)
        self.host_i = torch.zeros(3 * padded, dtype=torch.int64, pin_memory=pin)
        self.dev_f = torch.zeros(2 * padded, dtype=torch.float32, device=device) if pin else self.host_f
        self.dev_i = torch.zeros(3 * padded, dtype=torch.int64, device=device) if pin else self.host_i
        self._uploaded = torch.cuda.Event() if pin else None
        p = padded
        self.device_views = {
            "temperature": self.dev_f[:p],
            "top_p": self.dev_f[p:],
            "top_k": self.dev_i[:p],
            "seeds": self.dev_i[p : 2 * p],
            "steps": self.dev_i[2 * p :],
        }

    def fill(
        self, temperature: list[float], top_k: list[int], top_p: list[float], seeds: list[int], steps: list[int]
    ) -> None:
        n, p = len(temperature), self.padded
        if not n == len(top_k) == len(top_p) == len(seeds) == len(steps) or n > p:
            raise ValueError(f"SamplingInputs.fill: {n} rows of mismatched lengths for a padded batch of {p}")
        if self._uploaded is not None:
            self._uploaded.synchronize()
        f, i = self.host_f.numpy(), self.host_i.numpy()
        f[:n], f[n:p], f[p : p + n], f[p + n :] = temperature, 0.0, top_p, 1.0
        i[:n], i[n:p] = top_k, -1
        i[p : p + n], i[p + n : 2 * p] = [seed_bits(s) for s in seeds], 0
        i[2 * p : 2 * p + n], i[2 * p + n :] = steps, 0

    def upload(self) -> dict[str, torch.Tensor]:
        if self._uploaded is not None:
            self.dev_f.copy_(self.host_f, non_blocking=True)
            self.dev_i.copy_(self.host_i, non_blocking=True)
            self._uploaded.record()
        return self.device_views


class StepExtras:
    """What a step computes besides its tokens: logprobs (a top-k width for the batch) and logits processors
    (penalties, bans, min_p; engine.penalties). `key` names the captured graph that computes exactly this;
    a batch that asks for none of it has `none` set and runs the plain sampler.

    Built from the step's rows (anything with `logprobs` and `processors` attributes: StepRow); its device
    tensors live in `cache` (the runner's), one per name and shape, so a captured graph reads the same
    addresses at every replay."""

    def __init__(
        self, width: int, packed: dict[str, torch.Tensor] | None, penalize: bool, device: torch.device, cache: dict
    ) -> None:
        self.width, self.packed, self.penalize = width, packed, penalize
        self._device, self._cache = device, cache
        tokens = 0 if packed is None else packed["tokens"].shape[1]
        self.key = (width, packed is not None, penalize, tokens)
        self.none = width < 0 and packed is None

    @classmethod
    def build(cls, rows: list[Any], padded: int, vocab: int, device: torch.device, cache: dict) -> StepExtras:
        width = graph_width(max((r.logprobs for r in rows), default=-1))
        procs = [r.processors for r in rows]
        if all(p is None for p in procs):
            return cls(width, None, False, device, cache)
        penalize = any(p is not None and p.penalized for p in procs)
        return cls(width, penalties.pack(procs, padded, vocab), penalize, device, cache)

    def upload(self) -> dict[str, torch.Tensor]:
        """The processors' tensors on the device, named as sample_step's keyword arguments (proc_*)."""
        if self.packed is None:
            return {}
        if self._device.type != "cuda":
            return {"proc_" + name: t for name, t in self.packed.items()}
        out = {}
        for name, host in self.packed.items():
            key = (name, tuple(host.shape))
            dev = self._cache.get(key)
            if dev is None:
                dev = self._cache[key] = torch.empty_like(host, device=self._device)
            dev.copy_(host.pin_memory(), non_blocking=True)
            out["proc_" + name] = dev
        return out


def sample_with_extras(
    flags: FlagSnapshot,
    logits: torch.Tensor,  # [batch, vocab]
    mode: Mode,
    sampling: dict[str, torch.Tensor],  # SamplingInputs' device views (temperature, top_k, top_p, seeds, steps)
    extras: StepExtras,
    procs: dict[str, torch.Tensor] | None = None,  # extras' device tensors (default: extras.upload())
) -> Any:  # [batch] int64, or (tokens, logprob, rank, top values, top ids) with logprobs
    """The logits processors, then the sampler, then the raw logprobs of what it drew: device ops only."""
    raw = logits
    if extras.packed is not None:
        d = extras.upload() if procs is None else procs
        logits = penalties.apply(
            logits,
            sampling["temperature"],
            d["proc_tokens"],
            d["proc_weights"],
            d["proc_presence"],
            d["proc_frequency"],
            d["proc_repetition"],
            d["proc_min_p"],
            penalize=extras.penalize,
        )
    tokens = sample(flags, logits, mode=mode, **sampling)
    if extras.width < 0:
        return tokens
    return (tokens, *device_logprobs(raw, tokens, extras.width))
