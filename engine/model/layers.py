"""Weight-holding building blocks shared by the Qwen3 models; each owns its weight loading."""
from __future__ import annotations

import torch
from torch import nn

from engine.ops.linear import embedding, linear
from engine.ops.norm import rms_norm


def default_weight_loader(param: nn.Parameter, loaded: torch.Tensor, name: str) -> None:
    """Copy a checkpoint tensor into `param`, converting dtype; a shape mismatch names the tensor."""
    if tuple(param.shape) != tuple(loaded.shape):
        raise ValueError(f"{name}: checkpoint shape {tuple(loaded.shape)} != model shape {tuple(param.shape)}")
    with torch.no_grad():
        param.copy_(loaded)


def new_param(*shape: int, dtype: torch.dtype) -> nn.Parameter:
    # allocated on the device of the enclosing `with torch.device(...)` the loader opens
    return nn.Parameter(torch.empty(*shape, dtype=dtype), requires_grad=False)


class Linear(nn.Module):
    """y = x W^T (+ b), with W stored [out_features, in_features] as in HF checkpoints."""

    def __init__(self, in_features: int, out_features: int, bias: bool, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = new_param(out_features, in_features, dtype=dtype)
        self.bias = new_param(out_features, dtype=dtype) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [tokens, in_features]
        return linear(x, self.weight, self.bias)


class MergedLinear(nn.Module):
    """Several linears on one input whose weights sit side by side in one [sum(out), in] tensor.

    Each part keeps its own `Linear` (and its checkpoint name); its weight is a view into the merged
    tensor, so loading a checkpoint into the parts fills the merged tensor and no weight is held twice.
    `forward` is one GEMM for all parts: fewer, larger launches in a decode step.
    """

    def __init__(self, in_features: int, out_features: list[int], bias: bool, dtype: torch.dtype) -> None:
        super().__init__()
        self.sizes = list(out_features)
        self.parts = [Linear(in_features, n, bias, dtype) for n in self.sizes]
        # plain attributes, not buffers: the parameters that alias them are what state_dict and .to() see
        self.weight = torch.empty(sum(self.sizes), in_features, dtype=dtype)
        self.bias = torch.empty(sum(self.sizes), dtype=dtype) if bias else None
        start = 0
        for part, n in zip(self.parts, self.sizes):
            part.weight = nn.Parameter(self.weight[start:start + n], requires_grad=False)
            if self.bias is not None:
                part.bias = nn.Parameter(self.bias[start:start + n], requires_grad=False)
            start += n

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [tokens, in] -> [tokens, sum(out)]
        w = self.parts[0].weight
        if w.untyped_storage().data_ptr() != self.weight.untyped_storage().data_ptr():
            raise RuntimeError("MergedLinear: the part weights no longer alias the merged weight (the module "
                               "was moved with .to()?); build the model on its device instead")
        return linear(x, self.weight, self.bias)


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = new_param(size, dtype=dtype)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [tokens, size]
        return rms_norm(x, self.weight, self.eps)


class Embedding(nn.Module):
    def __init__(self, vocab: int, hidden: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = new_param(vocab, hidden, dtype=dtype)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # ids: [tokens]
        return embedding(ids, self.weight)
