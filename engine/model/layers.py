"""Weight-holding building blocks shared by the Qwen3 models; each owns its weight loading."""

from __future__ import annotations

import torch
from torch import nn

from engine import kernels
from engine.flags import FlagSnapshot
from engine.model import parallel
from engine.model.config import QuantConfig
from engine.model.parallel import default_weight_loader
from engine.ops._packing import pack_int32, unpack_int32


def new_param(*shape: int, dtype: torch.dtype) -> nn.Parameter:
    # allocated on the device of the enclosing `with torch.device(...)` the loader opens
    return nn.Parameter(torch.empty(*shape, dtype=dtype), requires_grad=False)


class Linear(nn.Module):
    """y = x W^T (+ b), with W stored [out_features, in_features] as in HF checkpoints."""

    quantized = False  # a dense weight (the table's fused-prologue arms read it: engine/kernels/layer.py)

    def __init__(self, in_features: int, out_features: int, bias: bool, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = new_param(out_features, in_features, dtype=dtype)
        self.bias = new_param(out_features, dtype=dtype) if bias else None
        self.all_reduce: parallel.Reduce | None = None  # a row-parallel layer's sum over ranks (parallel.row)

    def forward(self, x: torch.Tensor, flags: FlagSnapshot) -> torch.Tensor:  # x: [tokens, in_features]
        return self.reduced(kernels.linear(flags, x, self.weight, self.bias))

    def reduced(self, y: torch.Tensor) -> torch.Tensor:
        """The output summed over the ranks of a row-parallel layer (as is with one rank)."""
        return y if self.all_reduce is None else self.all_reduce(y)


class MergedLinear(nn.Module):
    """Several linears on one input whose weights sit side by side in one [sum(out), in] tensor.

    Each part keeps its own `Linear` (and its checkpoint name); its weight is a view into the merged
    tensor, so loading a checkpoint into the parts fills the merged tensor and no weight is held twice.
    `forward` is one GEMM for all parts: fewer, larger launches in a decode step.
    """

    def __init__(
        self,
        in_features: int,
        out_features: list[int],
        bias: bool,
        dtype: torch.dtype,
        quant: QuantConfig | None = None,
    ) -> None:
        super().__init__()
        self.sizes = list(out_features)
        self.quantized = quant is not None
        self.weight: torch.Tensor | None
        self.bias: torch.Tensor | None
        if quant is not None:  # quantized parts hold their own packed tensors: forward runs each
            self.parts: list[nn.Module] = [QuantLinear(in_features, n, bias, dtype, quant) for n in self.sizes]
            self.weight, self.bias = None, None
            return
        self.parts = [Linear(in_features, n, bias, dtype) for n in self.sizes]
        # plain attributes, not buffers: the parameters that alias them are what state_dict and .to() see
        self.weight = torch.empty(sum(self.sizes), in_features, dtype=dtype)
        self.bias = torch.empty(sum(self.sizes), dtype=dtype) if bias else None
        start = 0
        for part, n in zip(self.parts, self.sizes):
            part.weight = nn.Parameter(self.weight[start : start + n], requires_grad=False)
            if self.bias is not None:
                part.bias = nn.Parameter(self.bias[start : start + n], requires_grad=False)
            start += n

    def forward(self, x: torch.Tensor, flags: FlagSnapshot) -> torch.Tensor:  # x: [tokens, in] -> [tokens, sum(out)]
        if self.quantized:
            return torch.cat([part(x, flags) for part in self.parts], dim=-1)
        part = self.parts[0]
        assert isinstance(part, Linear) and self.weight is not None  # not quantized: dense parts, merged weight
        if part.weight.untyped_storage().data_ptr() != self.weight.untyped_storage().data_ptr():
            raise RuntimeError(
                "MergedLinear: the part weights no longer alias the merged weight (the module "
                "was moved with .to()?); build the model on its device instead"
            )
        return kernels.linear(flags, x, self.weight, self.bias)


def make_linear(
    in_features: int, out_features: int, bias: bool, dtype: torch.dtype, quant: QuantConfig | None = None
) -> nn.Module:
    """A decoder projection: `Linear`, or `QuantLinear` when the checkpoint is quantized."""
    if quant is None:
        return Linear(in_features, out_features, bias, dtype)
    return QuantLinear(in_features, out_features, bias, dtype, quant)


class QuantLinear(nn.Module):
    """y = x W^T (+ b) with W held quantized (AWQ, GPTQ or NVFP4), dequantized by the op it dispatches to.

    It owns its loading: `load_tensor` takes each of its checkpoint tensors (under the engine's names:
    qweight, qzeros, scales, g_idx; packed, block_scales, global_scale; or a dense `weight` for a module the
    checkpoint left unquantized) and checks dtype and shape; `finish_loading` checks that none is missing and
    puts GPTQ act-order rows in g_idx order (x is permuted to match), so each group's scales are read in order.
    """

    quantized = True  # no dense weight for a fused-prologue arm (engine/kernels/layer.py)
    # buffers registered by load_tensor / _sort_act_order (which of them exist depends on the method)
    qweight: torch.Tensor
    scales: torch.Tensor
    g_idx: torch.Tensor
    input_perm: torch.Tensor | None

    def __init__(self, in_features: int, out_features: int, bias: bool, dtype: torch.dtype, quant: QuantConfig) -> None:
        super().__init__()
        self.in_features, self.out_features, self.dtype, self.quant = in_features, out_features, dtype, quant
        self.bias = new_param(out_features, dtype=dtype) if bias else None
        self.weight: nn.Parameter | None = None  # dense, only for a module the checkpoint left unquantized
        self.register_buffer("input_perm", None)  # GPTQ act order: x[..., input_perm] meets the sorted rows
        self.device = torch.empty(0).device  # the enclosing `with torch.device(...)` of the loader
        self.expected = quant_shapes(quant, in_features, out_features)
        self.all_reduce: parallel.Reduce | None = None  # a row-parallel layer's sum over ranks (parallel.row)
        self.shard: tuple[str, parallel.Ranges] | None = None  # the features this rank holds (parallel.column/row)

    def load_tensor(self, key: str, loaded: torch.Tensor, name: str) -> None:
        """Take one checkpoint tensor under the engine's name `key`; a wrong dtype or shape names `name`."""
        if self.shard is not None:
            loaded = parallel.quant_slice(self.quant, key, loaded, self.shard, name)
        if key == "weight":
            self.weight = nn.Parameter(
                torch.empty(self.out_features, self.in_features, dtype=self.dtype, device=self.device),
                requires_grad=False,
            )
            default_weight_loader(self.weight, loaded, name)
            return
        if key not in self.expected:
            raise ValueError(
                f"{name}: not a tensor of this {describe(self.quant)} linear layer "
                f"(expected {', '.join(self.expected)})"
            )
        dtypes, shape = self.expected[key]
        if loaded.dtype not in dtypes:
            raise ValueError(
                f"{name}: dtype {loaded.dtype} is not {' or '.join(map(str, dtypes))} ({describe(self.quant)})"
            )
        if tuple(loaded.shape) != shape and not (key == "global_scale" and loaded.numel() == 1):
            raise ValueError(
                f"{name}: checkpoint shape {tuple(loaded.shape)} != {shape} for in_features="
                f"{self.in_features}, out_features={self.out_features} ({describe(self.quant)})"
            )
        if key == "global_scale":
            loaded = loaded.float().reshape(())
            if self.quant.layout == "compressed-tensors":
                loaded = 1.0 / loaded  # compressed-tensors stores the divisor; the ops multiply
        self.register_buffer(key, loaded.to(self.device).contiguous())

    def finish_loading(self, prefix: str) -> None:
        """After every tensor is in: a missing one names itself; GPTQ rows go into g_idx order."""
        if self.weight is not None:
            return
        have = {k for k in self.expected if hasattr(self, k)}
        if self.quant.method == "gptq" and "g_idx" not in have and not self.quant.desc_act:
            group = self.quant.group_size or self.in_features
            self.register_buffer("g_idx", (torch.arange(self.in_features, device=self.device) // group).int())
            have.add("g_idx")
        if not have:
            raise ValueError(f"{prefix}.weight: missing from the checkpoint (and no {describe(self.quant)} tensors)")
        for key in self.expected:
            if key not in have:
                raise ValueError(
                    f"{prefix}.{CHECKPOINT_KEYS.get((self.quant.layout, key), key)}: missing from "
                    f"the checkpoint (the {describe(self.quant)} layer needs {', '.join(self.expected)})"
                )
        if self.quant.method == "gptq":
            self._sort_act_order(prefix)

    def _sort_act_order(self, prefix: str) -> None:
        g_idx: torch.Tensor = self.g_idx
        groups = self.scales.shape[0]
        if int(g_idx.min()) < 0 or int(g_idx.max()) >= groups:
            raise ValueError(
                f"{prefix}.g_idx: values span [{int(g_idx.min())}, {int(g_idx.max())}] outside the "
                f"{groups} groups of {prefix}.scales"
            )
        if bool((g_idx[1:] >= g_idx[:-1]).all()):
            return  # already in order
        perm = torch.argsort(g_idx, stable=True)
        bits = self.quant.bits
        rows = unpack_int32(self.qweight.T, bits).T[perm]  # [K, N] in g_idx order
        self.register_buffer("qweight", pack_int32(rows.T, bits).T.contiguous())
        self.register_buffer("g_idx", g_idx[perm].contiguous())
        self.register_buffer("input_perm", perm)

    def forward(self, x: torch.Tensor, flags: FlagSnapshot) -> torch.Tensor:  # x: [tokens, in_features]
        y = self._forward(x, flags)
        return y if self.all_reduce is None else self.all_reduce(y)

    def _forward(self, x: torch.Tensor, flags: FlagSnapshot) -> torch.Tensor:
        if self.weight is not None:
            return kernels.linear(flags, x, self.weight, self.bias)
        if self.input_perm is not None:
            x = x.index_select(-1, self.input_perm)
        q = self.quant
        tensors = {k: getattr(self, k) for k in self.expected}
        return kernels.quantized_linear(
            flags,
            x,
            q.method,
            tensors,
            self.bias,
            group_size=q.group_size or self.in_features,
            bits=q.bits,
            version=q.version,
        )


# the checkpoint's own name of an engine tensor, where the two differ (for messages)
CHECKPOINT_KEYS = {
    ("modelopt", "packed"): "weight",
    ("modelopt", "block_scales"): "weight_scale",
    ("modelopt", "global_scale"): "weight_scale_2",
    ("compressed-tensors", "packed"): "weight_packed",
    ("compressed-tensors", "block_scales"): "weight_scale",
    ("compressed-tensors", "global_scale"): "weight_global_scale",
}
_INT32 = (torch.int32,)
_SCALE = (torch.float16, torch.bfloat16, torch.float32)


def quant_shapes(q: QuantConfig, k: int, n: int) -> dict[str, tuple[tuple[torch.dtype, ...], tuple[int, ...]]]:
    """Engine tensor name -> (allowed dtypes, shape) of a [k in, n out] linear in the layout `q`."""
    if q.method == "nvfp4":
        if k % 16:
            raise ValueError(f"in_features={k} is not a multiple of 16 (NVFP4 block)")
        return {
            "packed": ((torch.uint8,), (n, k // 2)),
            "block_scales": ((torch.float8_e4m3fn,), (n, k // 16)),
            "global_scale": ((torch.float32,), ()),
        }
    group = q.group_size or k
    if q.method == "awq":
        if n % 8 or k % group:
            raise ValueError(
                f"AWQ linear [{k} -> {n}]: out_features must be a multiple of 8 and group_size "
                f"{group} must divide in_features"
            )
        return {
            "qweight": (_INT32, (k, n // 8)),
            "qzeros": (_INT32, (k // group, n // 8)),
            "scales": (_SCALE, (k // group, n)),
        }
    per_word = 32 // q.bits
    if k % per_word or n % per_word:
        raise ValueError(f"GPTQ linear [{k} -> {n}]: in_ and out_features must be multiples of {per_word}")
    groups = -(-k // group)
    return {
        "qweight": (_INT32, (k // per_word, n)),
        "qzeros": (_INT32, (groups, n // per_word)),
        "scales": (_SCALE, (groups, n)),
        "g_idx": ((torch.int32, torch.int64), (k,)),
    }


def describe(q: QuantConfig) -> str:
    if q.method == "nvfp4":
        return f"NVFP4 ({q.layout})"
    extra = f", v{q.version}" + (", act order" if q.desc_act else "") if q.method == "gptq" else ""
    return f"{q.method.upper()} {q.bits}-bit group {q.group_size or 'all'}{extra}"


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = new_param(size, dtype=dtype)
        self.eps = eps

    def forward(self, x: torch.Tensor, flags: FlagSnapshot) -> torch.Tensor:  # x: [tokens, size]
        return kernels.rms_norm(flags, x, self.weight, self.eps)


class Embedding(nn.Module):
    """The token embedding; under tensor parallelism each rank holds a slice of the vocabulary's rows."""

    def __init__(self, vocab: int, hidden: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.start, rows = parallel.vocab_rows(vocab)
        self.rows, self.comm = rows, parallel.current().comm
        self.weight = new_param(rows, hidden, dtype=dtype)
        if self.comm is not None:
            self.weight.weight_loader = parallel.vocab_loader(vocab)  # type: ignore[attr-defined]

    def forward(self, ids: torch.Tensor, flags: FlagSnapshot) -> torch.Tensor:  # ids: [tokens]
        if self.comm is None:
            return kernels.embedding(flags, ids, self.weight)
        return parallel.embed(lambda i: kernels.embedding(flags, i, self.weight), ids, self.start, self.rows, self.comm)
