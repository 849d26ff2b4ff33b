"""SiLU-and-mul, the gated MLP activation of Qwen3/Llama (row KERNEL-ACT)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.ops._check import FLOAT_DTYPES, check_tensor


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:  # x: [..., 2*I] -> [..., I], x.dtype
    """`silu(gate) * up` with gate = x[..., :I] and up = x[..., I:].

    Rounding (as Hugging Face's `act_fn(gate_proj(x)) * up_proj(x)`):
    silu(gate) is computed in fp32 inside torch and rounded to x.dtype, then the
    product with up is rounded to x.dtype. Two roundings, not one.
    The gate half is made contiguous before the silu, as Hugging Face's dense MLP
    applies it to the contiguous gate_proj output: torch's fp32 silu differs in
    the last bit between its vectorised and scalar paths, which depend on layout.
    """
    inter = x.shape[-1] // 2
    return F.silu(x[..., :inter].contiguous()) * x[..., inter:]


def check_silu_and_mul(x: torch.Tensor) -> None:
    check_tensor(x, "x", dtypes=FLOAT_DTYPES)
    if x.dim() < 1 or x.shape[-1] % 2:
        raise ValueError(f"x: last dim must be even (gate and up halves), got shape {tuple(x.shape)}")


def sigmoid_gate(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:  # x: [..., n], gate: [..., n or 1]
    """`x * sigmoid(gate)` in x.dtype (sigmoid rounded to the dtype, then the product): Qwen3-Next's attention output
    gate and its shared expert's gate, as Hugging Face writes them."""
    return x * torch.sigmoid(gate)


def check_sigmoid_gate(x: torch.Tensor, gate: torch.Tensor) -> None:
    check_tensor(x, "x", dtypes=FLOAT_DTYPES)
    check_tensor(gate, "gate", ndim=x.dim(), dtypes=(x.dtype,))
    if gate.shape[:-1] != x.shape[:-1] or gate.shape[-1] not in (1, x.shape[-1]):
        raise ValueError(f"gate: shape {tuple(gate.shape)} does not gate x's {tuple(x.shape)}")
