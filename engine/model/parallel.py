"""Tensor-parallel sharding of the model's layers: which slice of each checkpoint tensor a rank holds.

A model is built inside `building(shard)` (as it is built inside `with torch.device(...)`): its constructors
ask `current()` for this rank's place and build layers of the local sizes. Column-parallel layers (q/k/v,
gate/up, the delta net's input projections) hold a slice of the output features and need no communication;
row-parallel layers (o_proj, down_proj, out_proj) hold a slice of the input features and all-reduce their
output once; the embedding and the LM head hold a slice of the vocabulary (padded to a multiple of the
ranks). KV heads are split where there are at least as many as ranks, else each rank holds the one KV head
its query heads read (replicated, as vLLM does). MoE experts are tensor-parallel: every rank holds every
expert's slice of the intermediate size. With one rank every helper is the identity.

Loading stays with the layers: a sharded parameter carries a `weight_loader` that cuts its slice out of the
full checkpoint tensor; a quantized linear cuts its packed tensors along their packing (`quant_slice`).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

import torch
from torch import nn

from engine.model.config import GDNConfig, ModelConfig, QuantConfig

Ranges = tuple[tuple[int, int], ...]  # [start, stop) spans of one dimension of a checkpoint tensor, in order
Reduce = Callable[[torch.Tensor], torch.Tensor]
M = TypeVar("M", bound=nn.Module)


class Collectives(Protocol):
    """What a sharded layer needs of the process group (engine.distributed.Group)."""

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor: ...
    def all_gather(self, t: torch.Tensor) -> torch.Tensor: ...  # ranks' tensors concatenated on the last dim


@dataclass(frozen=True)
class Shard:
    """This rank's place in a tensor-parallel group; `comm` is None for one rank."""

    rank: int = 0
    size: int = 1
    comm: Collectives | None = None

    def even(self, total: int, what: str) -> range:
        """This rank's units of `total` (heads, features) split evenly; `what` names the count in the error."""
        if total % self.size:
            raise ValueError(f"tensor_parallel_size={self.size}: {what}={total} is not divisible by {self.size}")
        n = total // self.size
        return range(self.rank * n, (self.rank + 1) * n)

    def kv_heads(self, total: int) -> range:
        """The KV heads this rank holds: an even split, or (fewer heads than ranks) the one its query heads read."""
        if total >= self.size:
            return self.even(total, "num_key_value_heads")
        if self.size % total:
            raise ValueError(
                f"tensor_parallel_size={self.size}: num_key_value_heads={total} neither divides by nor divides "
                f"{self.size}, so the KV heads can be neither split nor replicated"
            )
        head = self.rank * total // self.size
        return range(head, head + 1)


ONE = Shard()
_CURRENT: contextvars.ContextVar[Shard] = contextvars.ContextVar("engine_tp_shard", default=ONE)


def current() -> Shard:
    """The shard of the model being built (one rank outside `building`)."""
    return _CURRENT.get()


@contextlib.contextmanager
def building(shard: Shard | None) -> Iterator[None]:
    token = _CURRENT.set(shard or ONE)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def spans(r: range, width: int, offset: int = 0) -> tuple[int, int]:
    """Units `r` of `width` rows each, as one [start, stop) span of rows."""
    return (offset + r.start * width, offset + r.stop * width)


# --- config ---------------------------------------------------------------------
def check(config: ModelConfig, size: int) -> None:
    """Raise the one-line error of the first count `size` ranks cannot split (before any rank starts)."""
    if size < 1:
        raise ValueError(f"tensor_parallel_size={size}: must be at least 1")
    for rank in range(size):  # every rank's view: the KV rule depends on the rank
        s = Shard(rank, size)
        s.even(config.num_attention_heads, "num_attention_heads")
        s.kv_heads(config.num_key_value_heads)
        s.even(config.intermediate_size, "intermediate_size")
        if config.num_experts:
            s.even(config.moe_intermediate_size, "moe_intermediate_size")
        if config.shared_expert_intermediate_size:
            s.even(config.shared_expert_intermediate_size, "shared_expert_intermediate_size")
        if config.gdn is not None:
            s.even(config.gdn.num_key_heads, "linear_num_key_heads")
    if config.quant is not None and size > 1:
        _check_quant(config, config.quant, size)


def _check_quant(config: ModelConfig, q: QuantConfig, size: int) -> None:
    """Each quantized projection's per-rank features fall on its packing and groups (every rank's slice is
    the same size, so rank 0's decides), or the one-line error names the projection."""
    d, heads = config.head_dim, config.num_attention_heads // size
    kv = len(Shard(0, size).kv_heads(config.num_key_value_heads))
    gated = 2 if config.gdn is not None else 1  # Qwen3-Next's q_proj: query and gate per head
    layers = [("q_proj", "out", heads * d * gated), ("k_proj", "out", kv * d), ("o_proj", "in", heads * d)]
    dense = any(not config.layer_is_sparse(i) for i in range(config.num_hidden_layers))  # a Qwen3MLP layer
    mlps = [("", config.intermediate_size)] if dense else []
    if config.shared_expert_intermediate_size:
        mlps.append(("shared_expert.", config.shared_expert_intermediate_size))
    for prefix, inter in mlps:
        layers += [(f"{prefix}gate_proj", "out", inter // size), (f"{prefix}down_proj", "in", inter // size)]
    if config.gdn is not None:
        g = config.gdn
        keys, per = g.num_key_heads // size, g.num_value_heads // g.num_key_heads
        qkvz = keys * (2 * g.key_head_dim + 2 * per * g.value_head_dim)
        layers += [("in_proj_qkvz", "out", qkvz), ("in_proj_ba", "out", keys * 2 * per)]
        layers += [("out_proj", "in", keys * per * g.value_head_dim)]
    for name, side, n in layers:
        for (method, key), _ in _QUANT_DIMS.items():
            step = quant_step(q, key, side) if method == q.method else None
            if step is not None and n % step:
                raise ValueError(
                    f"tensor_parallel_size={size}: {name} would hold {n} {side}put features per rank, not a "
                    f"multiple of {q.method.upper()} {key}'s {step}; use fewer ranks"
                )


def local_config(config: ModelConfig, shard: Shard | None) -> ModelConfig:
    """The config with this rank's KV heads and delta net heads: what its KV cache and recurrent state hold."""
    if shard is None or shard.size == 1:
        return config
    gdn = config.gdn if config.gdn is None else local_gdn(config.gdn, shard)
    return dataclasses.replace(config, num_key_value_heads=len(shard.kv_heads(config.num_key_value_heads)), gdn=gdn)


def local_gdn(gdn: GDNConfig, shard: Shard) -> GDNConfig:
    keys = shard.even(gdn.num_key_heads, "linear_num_key_heads")
    per = gdn.num_value_heads // gdn.num_key_heads
    return dataclasses.replace(gdn, num_key_heads=len(keys), num_value_heads=len(keys) * per)


# --- linear layers -------------------------------------------------------------------
def column(module: M, *parts: Ranges) -> M:
    """Make `module` (a Linear, QuantLinear or the parts of a MergedLinear, one Ranges each) hold the output
    rows `parts` of its checkpoint tensors. Returns it."""
    shard = current()
    if shard.size == 1:
        return module
    targets = list(getattr(module, "parts", [module]))
    assert len(targets) == len(parts), (len(targets), len(parts))
    for target, ranges in zip(targets, parts):
        _shard_linear(target, "out", ranges, shard)
    return module


def row(module: M, ranges: Ranges) -> M:
    """Make `module` hold the input columns `ranges` and all-reduce its output; rank 0 alone adds the bias."""
    shard = current()
    if shard.size == 1:
        return module
    _shard_linear(module, "in", ranges, shard)
    comm = shard.comm
    module.all_reduce = comm.all_reduce if comm is not None else None  # type: ignore[assignment]
    return module


def _shard_linear(module: nn.Module, dim: str, ranges: Ranges, shard: Shard) -> None:
    if hasattr(module, "quant"):  # a QuantLinear: its packed tensors are cut as they load
        module.shard = (dim, ranges)  # type: ignore[assignment]
        q = cast(QuantConfig, module.quant)
        if dim == "in" and q.method == "gptq" and q.desc_act:  # every group's scales and zeros stay (quant_slice)
            groups = -(-sum(b - a for a, b in ranges) * shard.size // q.group_size)
            expected = cast(dict[str, tuple[Any, tuple[int, ...]]], module.expected)
            for key in ("scales", "qzeros"):
                dtypes, shape = expected[key]
                expected[key] = (dtypes, (groups, *shape[1:]))
    else:
        module.weight.weight_loader = slicer(0 if dim == "out" else 1, ranges)  # type: ignore[union-attr]
    bias = getattr(module, "bias", None)
    if bias is not None:
        bias.weight_loader = slicer(0, ranges) if dim == "out" else (_copy if shard.rank == 0 else _zero)


def default_weight_loader(param: nn.Parameter, loaded: torch.Tensor, name: str) -> None:
    """The plain weight_loader: copy a checkpoint tensor into `param`, converting dtype; a shape mismatch names the tensor."""
    if tuple(param.shape) != tuple(loaded.shape):
        raise ValueError(f"{name}: checkpoint shape {tuple(loaded.shape)} != model shape {tuple(param.shape)}")
    with torch.no_grad():
        param.copy_(loaded)


def slicer(dim: int, ranges: Ranges, pad_to: int = 0) -> Callable[[nn.Parameter, torch.Tensor, str], None]:
    """A weight_loader that copies the spans `ranges` of dimension `dim` (zero rows up to `pad_to`)."""

    def load(param: nn.Parameter, loaded: torch.Tensor, name: str) -> None:
        piece = cut(loaded, dim, ranges, name)
        if pad_to > piece.shape[dim]:
            pad = list(piece.shape)
            pad[dim] = pad_to - piece.shape[dim]
            piece = torch.cat([piece, piece.new_zeros(pad)], dim)
        default_weight_loader(param, piece, name)

    return load


def cut(t: torch.Tensor, dim: int, ranges: Ranges, name: str) -> torch.Tensor:
    if any(stop > t.shape[dim] for _, stop in ranges):
        raise ValueError(f"{name}: checkpoint shape {tuple(t.shape)} is too small for this rank's slice {ranges}")
    pieces = [t.narrow(dim, a, b - a) for a, b in ranges]
    return pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim)


def _copy(param: nn.Parameter, loaded: torch.Tensor, name: str) -> None:
    default_weight_loader(param, loaded, name)


def _zero(param: nn.Parameter, loaded: torch.Tensor, name: str) -> None:
    _copy(param, torch.zeros_like(loaded), name)  # the sum over ranks adds rank 0's bias once


# per quantized tensor: (dimension, units per element) of the output features and of the input features;
# None: the tensor is not cut along that side (a scalar, or g_idx along the output)
_QUANT_DIMS: dict[tuple[str, str], tuple[tuple[int, str] | None, tuple[int, str] | None]] = {
    ("awq", "qweight"): ((1, "pack"), (0, "1")),
    ("awq", "qzeros"): ((1, "pack"), (0, "group")),
    ("awq", "scales"): ((1, "1"), (0, "group")),
    ("gptq", "qweight"): ((1, "1"), (0, "pack")),
    ("gptq", "qzeros"): ((1, "pack"), (0, "group")),
    ("gptq", "scales"): ((1, "1"), (0, "group")),
    ("gptq", "g_idx"): (None, (0, "1")),
    ("nvfp4", "packed"): ((0, "1"), (1, "2")),
    ("nvfp4", "block_scales"): ((0, "1"), (1, "16")),
    ("nvfp4", "global_scale"): (None, None),
}


def quant_step(q: QuantConfig, key: str, side: str) -> int | None:
    """Features per element of quantized tensor `key` along `side` ("out" or "in"); None: not cut that way."""
    how = _QUANT_DIMS[(q.method, key)][0 if side == "out" else 1]
    if how is None:
        return None
    unit = how[1]
    if unit == "group" and (q.group_size == 0 or (q.method == "gptq" and q.desc_act)):
        # one group over all of K, or act order (a slice of K reads groups from anywhere, by g_idx): every
        # rank keeps every group's scales and zeros
        return None
    return {"1": 1, "2": 2, "16": 16, "pack": 32 // q.bits, "group": q.group_size}[unit]


def quant_slice(q: QuantConfig, key: str, t: torch.Tensor, shard: tuple[str, Ranges], name: str) -> torch.Tensor:
    """This rank's piece of one quantized-linear tensor under the engine's name `key` (see QuantLinear)."""
    side, ranges = shard
    if key == "weight":  # a module the checkpoint left dense
        return cut(t, 0 if side == "out" else 1, ranges, name)
    per = quant_step(q, key, side)
    if per is None:
        return t
    how = _QUANT_DIMS[(q.method, key)][0 if side == "out" else 1]
    assert how is not None  # quant_step gave a step
    dim, unit = how
    group = q.group_size
    if any(a % per or b % per for a, b in ranges):
        raise ValueError(
            f"{name}: this rank's features {list(ranges)} do not fall on the {q.method.upper()} "
            f"{'group' if unit == 'group' else 'packing'} of {per}; use fewer ranks"
        )
    piece = cut(t, dim, tuple((a // per, b // per) for a, b in ranges), name)
    if key == "g_idx" and group and not q.desc_act:
        piece = piece - ranges[0][0] // group  # the group numbers of this rank's slice start at 0
    return piece


# --- vocabulary ----------------------------------------------------------------------
def vocab_rows(vocab: int) -> tuple[int, int]:
    """(first row, rows) of this rank's vocabulary slice; every rank holds ceil(vocab / size) rows."""
    shard = current()
    n = -(-vocab // shard.size)
    return shard.rank * n, n


def vocab_loader(vocab: int) -> Callable[[nn.Parameter, torch.Tensor, str], None]:
    start, n = vocab_rows(vocab)
    return slicer(0, ((start, min(start + n, vocab)),), pad_to=n)


def embed(
    lookup: Callable[[torch.Tensor], torch.Tensor], ids: torch.Tensor, start: int, rows: int, comm: Collectives
) -> torch.Tensor:  # ids: [tokens] -> [tokens, hidden]
    """A vocabulary-parallel lookup: each rank looks up its own rows, zeros the others, and the sum is the row."""
    local = ids - start
    outside = (local < 0) | (local >= rows)
    out = lookup(local.masked_fill(outside, 0))
    return comm.all_reduce(out.masked_fill(outside[:, None], 0))


def gather_logits(logits: torch.Tensor, vocab: int, comm: Collectives | None) -> torch.Tensor:
    """[rows, vocab / size] per rank -> [rows, vocab]: every rank's slice side by side, the padding cut off.
    Every rank gets the whole row (an all-gather, not a gather to rank 0), so all run one program, captured
    alike; only rank 0's sampled tokens are read."""
    if comm is None:
        return logits
    full = comm.all_gather(logits)
    return full if full.shape[-1] == vocab else full[:, :vocab].contiguous()  # the kernels take dense rows
