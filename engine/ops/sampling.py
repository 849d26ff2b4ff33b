"""Greedy argmax and seeded top-k/top-p sampling over logits (row KERNEL-SAMPLE)."""
from __future__ import annotations

import torch

from engine import flags
from engine.cuda import sample as cuda_sample
from engine.ops._check import FLOAT_DTYPES, check_tensor


def greedy_argmax(logits: torch.Tensor) -> torch.Tensor:  # logits: [batch, vocab] -> [batch] int64
    """Index of each row's maximum, with torch.argmax's rules.

    Ties: the lowest index wins. NaN: a NaN counts as larger than every number,
    so a row holding NaN returns its first NaN. No rounding (a pure selection).
    """
    check_tensor(logits, "logits", ndim=2, dtypes=FLOAT_DTYPES)
    if logits.shape[1] == 0:
        raise ValueError("logits: vocab dim is empty")
    if logits.is_cuda and flags.enabled("VT_ARGMAX_KERNEL") and flags.enabled("VT_KERNELS"):
        return cuda_sample.greedy_argmax(logits)
    return torch.argmax(logits, dim=-1)


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
    check_tensor(logits, "logits", ndim=2, dtypes=FLOAT_DTYPES)
    batch, vocab = logits.shape
    if vocab == 0:
        raise ValueError("logits: vocab dim is empty")
    if not isinstance(generator, torch.Generator) or generator.device.type != "cpu":
        raise TypeError("generator: expected a CPU torch.Generator (the draw runs on the CPU)")
    ks = _per_row(top_k, "top_k", batch).long()
    ps = _per_row(top_p, "top_p", batch).float()
    ts = _per_row(temperature, "temperature", batch).float()
    if bool((ts <= 0).any()):
        raise ValueError("temperature: must be > 0 (use greedy_argmax for temperature 0)")
    if bool(((ps <= 0) | (ps > 1)).any()):
        raise ValueError("top_p: must be in (0, 1]")
    if logits.is_cuda and flags.enabled("VT_SAMPLE_KERNEL") and flags.enabled("VT_KERNELS"):
        # the kernel's counter-based stream is seeded from the generator, which advances as a draw would
        seed = int(torch.randint(0, 2**63 - 1, (1,), generator=generator))
        return cuda_sample.sample_top_k_top_p(logits, ks, ps, ts, seed)
    scaled = logits.float().cpu() / ts[:, None]
    keep = _top_k_set(scaled, ks)
    keep = _top_p_set(scaled, keep, ps)
    probs = torch.softmax(scaled.masked_fill(~keep, float("-inf")), dim=-1)
    return torch.multinomial(probs, 1, generator=generator)[:, 0].to(logits.device)


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
