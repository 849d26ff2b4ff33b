"""Greedy argmax and seeded top-k/top-p sampling over logits (row KERNEL-SAMPLE), and the serving
sampler's per-request draw (`sample_rows`, engine/sampler.py)."""

from __future__ import annotations

import torch

from engine.ops._check import FLOAT_DTYPES, check_tensor


def greedy_argmax(logits: torch.Tensor) -> torch.Tensor:  # logits: [batch, vocab] -> [batch] int64
    """Index of each row's maximum, with torch.argmax's rules.

    Ties: the lowest index wins. NaN: a NaN counts as larger than every number,
    so a row holding NaN returns its first NaN. No rounding (a pure selection).
    """
    return torch.argmax(logits, dim=-1)


def check_greedy_argmax(logits: torch.Tensor) -> None:
    check_tensor(logits, "logits", ndim=2, dtypes=FLOAT_DTYPES)
    if logits.shape[1] == 0:
        raise ValueError("logits: vocab dim is empty")


def sample_top_k_top_p(
    logits: torch.Tensor,  # logits: [batch, vocab]
    top_k: int | torch.Tensor,  # int or [batch]; <= 0 or >= vocab keeps every token
    top_p: float | torch.Tensor,  # float or [batch] in (0, 1]; 1 keeps every token
    temperature: float | torch.Tensor,  # float or [batch], > 0
    generator: torch.Generator,
) -> torch.Tensor:  # [batch] int64
    """One token per row from softmax(logits / T) restricted to the top-k set, then to the top-p nucleus.

    Per row, in fp32 (the logits are upcast, then divided by the temperature):
    1. top-k: keep every token whose logit is >= the k-th largest (ties at the cut kept);
    2. top-p: over the kept tokens' softmax (renormalised over them), keep the
       smallest most-probable set whose mass reaches top_p, plus every token tied
       with its least probable member;
    3. draw from the softmax renormalised over what is left (torch.multinomial
       with `generator`, a CPU generator: the same generator state gives the same
       tokens, whatever device the logits are on).
    """
    ks, ps, ts = sampling_params(logits, top_k, top_p, temperature)
    scaled = logits.float().cpu() / ts[:, None]
    keep = _top_k_set(scaled, ks)
    keep = _top_p_set(scaled, keep, ps)
    probs = torch.softmax(scaled.masked_fill(~keep, float("-inf")), dim=-1)
    return torch.multinomial(probs, 1, generator=generator)[:, 0].to(logits.device)


def check_sample_top_k_top_p(
    logits: torch.Tensor,
    top_k: int | torch.Tensor,
    top_p: float | torch.Tensor,
    temperature: float | torch.Tensor,
    generator: torch.Generator,
) -> None:
    check_tensor(logits, "logits", ndim=2, dtypes=FLOAT_DTYPES)
    if logits.shape[1] == 0:
        raise ValueError("logits: vocab dim is empty")
    if not isinstance(generator, torch.Generator) or generator.device.type != "cpu":
        raise TypeError("generator: expected a CPU torch.Generator (the draw runs on the CPU)")
    _, ps, ts = sampling_params(logits, top_k, top_p, temperature)
    if bool((ts <= 0).any()):
        raise ValueError("temperature: must be > 0 (use greedy_argmax for temperature 0)")
    if bool(((ps <= 0) | (ps > 1)).any()):
        raise ValueError("top_p: must be in (0, 1]")


def sampling_params(
    logits: torch.Tensor, top_k: int | torch.Tensor, top_p: float | torch.Tensor, temperature: float | torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """top_k (int64), top_p and temperature (fp32) as [batch] CPU tensors."""
    batch = logits.shape[0]
    return (
        _per_row(top_k, "top_k", batch).long(),
        _per_row(top_p, "top_p", batch).float(),
        _per_row(temperature, "temperature", batch).float(),
    )


def _top_k_set(scaled: torch.Tensor, ks: torch.Tensor) -> torch.Tensor:  # [batch, vocab] -> bool, same shape
    vocab = scaled.shape[1]
    ordered = torch.sort(scaled, dim=-1, descending=True).values
    kth = ordered.gather(1, (ks.clamp(1, vocab) - 1)[:, None])
    off = ((ks <= 0) | (ks >= vocab))[:, None]
    return off | (scaled >= kth)


def _top_p_set(scaled: torch.Tensor, keep: torch.Tensor, ps: torch.Tensor) -> torch.Tensor:  # -> [batch, vocab]
    probs = torch.softmax(scaled.masked_fill(~keep, float("-inf")), dim=-1)
    ordered = torch.sort(probs, dim=-1, descending=True).values
    reach = torch.cumsum(ordered, dim=-1) >= ps[:, None]
    # first index whose cumulative mass reaches p; if rounding leaves the total just under p, the last kept
    last = torch.where(reach.any(dim=-1), reach.int().argmax(dim=-1), keep.sum(dim=-1) - 1)
    floor = ordered.gather(1, last[:, None])
    return keep & ((ps[:, None] >= 1.0) | (probs >= floor))


def _per_row(value: int | float | torch.Tensor, name: str, batch: int) -> torch.Tensor:
    """A scalar or a [batch] tensor as a [batch] CPU tensor."""
    if isinstance(value, torch.Tensor):
        if value.dim() != 1 or value.shape[0] != batch:
            raise ValueError(f"{name}: expected shape ({batch},), got {tuple(value.shape)}")
        return value.cpu()
    return torch.full((batch,), value)


MASK32 = 0xFFFFFFFF
GOLDEN32 = 0x9E3779B9


def sample_rows(
    logits: torch.Tensor,  # [batch, vocab], any float dtype
    temperature: torch.Tensor,  # [batch] float32, >= 0 (0: the row is greedy, its draw unused)
    top_k: torch.Tensor,  # [batch] int64, <= 0 or >= vocab: off
    top_p: torch.Tensor,  # [batch] float32 in (0, 1]
    seeds: torch.Tensor,  # [batch] int64
    steps: torch.Tensor,  # [batch] int64: index of the token being generated within its request
    filtered: bool = True,  # False: no row restricts top-k or top-p (the sets are skipped)
) -> torch.Tensor:  # [batch] int64
    """Each row's draw from softmax(logits / T) within its top-k set and top-p nucleus, by the Gumbel-max
    rule with noise from `gumbel` (a pure function of seed, step and token): no host reads, capturable."""
    hot = temperature > 0
    scaled = logits.float() / torch.where(hot, temperature, 1.0)[:, None]
    if filtered:
        keep = _top_p_set(scaled, _top_k_set(scaled, top_k), top_p)
        scaled = scaled.masked_fill(~keep, float("-inf"))
    return torch.argmax(scaled + gumbel(seeds, steps, logits.shape[1]), dim=-1)


def check_sample_rows(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    seeds: torch.Tensor,
    steps: torch.Tensor,
    filtered: bool = True,
) -> None:
    """Shapes and dtypes only (no host read of the values), so a captured step can run it."""
    check_greedy_argmax(logits)
    for t, name in (
        (temperature, "temperature"),
        (top_k, "top_k"),
        (top_p, "top_p"),
        (seeds, "seeds"),
        (steps, "steps"),
    ):
        check_tensor(t, name, ndim=1)
        if t.shape[0] != logits.shape[0]:
            raise ValueError(f"{name}: {t.shape[0]} rows != logits' batch {logits.shape[0]}")


def gumbel(seeds: torch.Tensor, steps: torch.Tensor, vocab: int) -> torch.Tensor:  # -> [batch, vocab] float32
    """Standard Gumbel noise, a pure function of (seed, step, vocabulary index) per element."""
    s = seeds.long()
    row = _mix(_mix((s & MASK32) ^ _mix((s >> 32) & MASK32)) ^ (steps.long() & MASK32))  # [batch]
    col = torch.arange(vocab, dtype=torch.int64, device=seeds.device) * GOLDEN32  # [vocab]
    bits = _mix((col[None, :] + row[:, None]) & MASK32)
    u = ((bits >> 8).float() + 0.5) * (1.0 / (1 << 24))  # uniform in (0, 1), 24 bits
    return -torch.log(-torch.log(u))


def _mix(x: torch.Tensor) -> torch.Tensor:
    """A bijective 32-bit integer hash (lowbias32) on int64 holding 32-bit values; products wrap mod 2**64,
    which keeps their low 32 bits exact."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & MASK32
    return x ^ (x >> 16)
