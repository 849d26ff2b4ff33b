"""Numerics cases for the gated delta net decode kernel: the output and the fp32 state (the chunked prefill kernel
lost its A/B and was retired; the prefill runs its reference)."""

from __future__ import annotations

from functools import partial

import torch

from engine.cuda import gdn
from engine.ops.gdn import gated_delta_decode
from lab.gates.cases import Inputs, KernelCase

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
# (batch, k_heads, heads, dk, dv, l2norm): Qwen3-Next-like heads (16 key, 32 value, 128 dims), odd sizes
SHAPES = ((1, 16, 32, 128, 128, True), (3, 2, 4, 128, 128, False), (5, 1, 3, 19, 83, True), (2, 4, 8, 256, 33, False))


def decode_inputs(
    seed: int,
    device: torch.device,
    *,
    batch: int,
    k_heads: int,
    heads: int,
    dk: int,
    dv: int,
    l2norm: bool,
    dtype: torch.dtype,
) -> Inputs:
    g = torch.Generator().manual_seed(seed)
    return {
        "q": torch.randn(batch, k_heads, dk, generator=g).to(dtype).to(device),
        "k": (torch.randn(batch, k_heads, dk, generator=g) / dk**0.5).to(dtype).to(device),
        "v": torch.randn(batch, heads, dv, generator=g).to(dtype).to(device),
        "g": (-2 * torch.rand(batch, heads, generator=g)).to(device),  # log decay <= 0
        "beta": torch.rand(batch, heads, generator=g).to(device),
        "state": torch.randn(batch, heads, dk, dv, generator=g).to(device),
        "opts": {"scale": dk**-0.5, "use_qk_l2norm": l2norm},
    }


def _args(x: Inputs) -> tuple:
    return x["q"], x["k"], x["v"], x["g"], x["beta"], x["state"]


def kernel(x: Inputs, which: int) -> torch.Tensor:
    return gdn.decode(*_args(x), **x["opts"])[which]


def reference(x: Inputs, which: int) -> torch.Tensor:
    return gated_delta_decode(*_args(x), **x["opts"])[which]


def _cases() -> list[KernelCase]:
    cases = []
    for dname, dtype in DTYPES.items():
        for i, (b, kh, h, dk, dv, l2) in enumerate(SHAPES):
            shape = f"b{b}-kh{kh}-h{h}-dk{dk}-dv{dv}{'-l2' if l2 else ''}"
            make = partial(decode_inputs, batch=b, k_heads=kh, heads=h, dk=dk, dv=dv, l2norm=l2, dtype=dtype)
            tags = ("small",) if i == 2 else ()
            cases.append(
                KernelCase(
                    name=f"gdn/decode-out/{dname}/{shape}",
                    arm="decode",
                    flag="VT_GDN_KERNEL",
                    dtype=dtype,
                    make=make,
                    kernel=partial(kernel, which=0),
                    reference=partial(reference, which=0),
                    tolerance=dname,
                    row="KERNEL-GDN",
                    tags=tags,
                )
            )
            cases.append(
                KernelCase(
                    name=f"gdn/decode-state/{dname}/{shape}",
                    arm="decode",
                    flag="VT_GDN_KERNEL",
                    dtype=torch.float32,
                    make=make,
                    kernel=partial(kernel, which=1),
                    reference=partial(reference, which=1),
                    tolerance="fp32",
                    row="KERNEL-GDN",
                )
            )
    return cases


CASES: list[KernelCase] = _cases()
