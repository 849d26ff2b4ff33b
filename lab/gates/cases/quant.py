"""Numerics cases for the AWQ, GPTQ and NVFP4 kernels: bit-exact dequant, and the M=1 dequant-GEMVs."""

from __future__ import annotations

from functools import partial

import torch

from engine.cuda import quant
from engine.ops import quant as ref_quant
from lab.gates.cases import Inputs, KernelCase

# (K, N, group): a 4096-wide projection, odd widths (N a multiple of 8), one group spanning all of K, an
# MLP-wide one (several K units per thread), and groups of 4 rows (changing inside a K unit) with split-K
INT4_SHAPES = ((4096, 4096, 128), (256, 776, 128), (128, 72, 32), (64, 8, 64), (4096, 14336, 128), (1032, 112, 4))
# (N, K): K % 32 == 16 takes the byte-wise path (with several chunks per lane at K = 1040)
NVFP4_SHAPES = ((4096, 4096), (19, 48), (770, 256), (33, 1040), (4096, 14336))
X_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _words(g: torch.Generator, *shape: int) -> torch.Tensor:
    """Random int32 words: every bit pattern is a valid set of eight int4 values."""
    return torch.randint(-(2**31), 2**31, shape, generator=g, dtype=torch.int64).to(torch.int32)


def int4_inputs(seed: int, device: torch.device, *, fmt: str, k: int, n: int, group: int, dtype: torch.dtype) -> Inputs:
    g = torch.Generator().manual_seed(seed)
    groups = k // group
    packed = _words(g, k, n // 8) if fmt == "awq" else _words(g, k // 8, n)
    x = {
        "qweight": packed,
        "qzeros": _words(g, groups, n // 8),
        "scales": (torch.rand(groups, n, generator=g) * 0.02 + 1e-3).to(torch.float16),
        "x": torch.randn(1, k, generator=g).to(dtype),
        "bias": torch.randn(n, generator=g).to(dtype),
    }
    if fmt != "awq":  # act order: the rows of each group scattered over K
        x["g_idx"] = (torch.arange(k) // group)[torch.randperm(k, generator=g)].to(torch.int32)
    return {key: v.to(device) for key, v in x.items()}


def nvfp4_inputs(seed: int, device: torch.device, *, n: int, k: int, dtype: torch.dtype) -> Inputs:
    g = torch.Generator().manual_seed(seed)
    return {
        "packed": torch.randint(0, 256, (n, k // 2), generator=g).to(torch.uint8).to(device),
        # includes e4m3 subnormals (< 2^-6)
        "block_scales": (torch.rand(n, k // 16, generator=g) * 400 + 1e-2).to(torch.float8_e4m3fn).to(device),
        "global_scale": (torch.rand(1, generator=g) * 1e-3 + 1e-4).to(device),
        "x": torch.randn(1, k, generator=g).to(dtype).to(device),
        "bias": torch.randn(n, generator=g).to(dtype).to(device),
    }


def _awq_args(x: Inputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """qweight, qzeros, scales and the group size."""
    return x["qweight"], x["qzeros"], x["scales"], x["x"].shape[-1] // x["scales"].shape[0]


def _gptq_args(version: int, x: Inputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int, int]:
    """qweight, qzeros, scales, g_idx, the bit width (4) and the GPTQ format version."""
    return x["qweight"], x["qzeros"], x["scales"], x["g_idx"], 4, version


def dequant(fmt: str, version: int, use_kernel: bool, x: Inputs) -> torch.Tensor:
    """The [K, N] (int4) or [N, K] (NVFP4) weight in bf16, from the kernel or the reference."""
    if fmt == "nvfp4":
        fn = quant.dequant_nvfp4 if use_kernel else ref_quant.dequant_nvfp4
        return fn(x["packed"], x["block_scales"], x["global_scale"], torch.bfloat16)
    if fmt == "awq":
        awq = quant.dequant_awq if use_kernel else ref_quant.dequant_awq
        return awq(*_awq_args(x), dtype=torch.bfloat16)
    gptq = quant.dequant_gptq if use_kernel else ref_quant.dequant_gptq
    return gptq(*_gptq_args(version, x), dtype=torch.bfloat16)


def gemv(fmt: str, version: int, use_kernel: bool, x: Inputs) -> torch.Tensor:
    """x @ W + bias for one row, from the fused kernel or the reference dequant-then-linear."""
    if fmt == "nvfp4":
        fn = quant.nvfp4_linear if use_kernel else ref_quant.nvfp4_linear
        return fn(x["x"], x["packed"], x["block_scales"], x["global_scale"], bias=x["bias"])
    if fmt == "awq":
        awq = quant.awq_linear if use_kernel else ref_quant.awq_linear
        return awq(x["x"], *_awq_args(x), bias=x["bias"])
    gptq = quant.gptq_linear if use_kernel else ref_quant.gptq_linear
    return gptq(x["x"], *_gptq_args(version, x), bias=x["bias"])


def _cases() -> list[KernelCase]:
    cases = []
    formats = (("awq", 1, "QUANT-AWQ"), ("gptq-v1", 1, "QUANT-GPTQ"), ("gptq-v2", 2, "QUANT-GPTQ"))
    for name, version, row in formats:
        fmt = name.split("-")[0]
        for i, (k, n, group) in enumerate(INT4_SHAPES):
            shape = f"k{k}-n{n}-g{group}"
            tags = ("small",) if i == 2 else ()
            make = partial(int4_inputs, fmt=fmt, k=k, n=n, group=group, dtype=torch.bfloat16)
            cases.append(
                KernelCase(
                    name=f"quant/{name}-dequant/bf16/{shape}",
                    arm="dequant",
                    flag="VT_DEQUANT_KERNEL",
                    dtype=torch.bfloat16,
                    make=make,
                    kernel=partial(dequant, fmt, version, True),
                    reference=partial(dequant, fmt, version, False),
                    tolerance="exact",
                    row=row,
                    tags=tags,
                )
            )
            for dname, dtype in X_DTYPES.items():
                cases.append(
                    KernelCase(
                        name=f"quant/{name}-gemv/{dname}/{shape}",
                        arm="dequant-gemv",
                        flag="VT_DEQUANT_GEMV",
                        dtype=dtype,
                        make=partial(int4_inputs, fmt=fmt, k=k, n=n, group=group, dtype=dtype),
                        kernel=partial(gemv, fmt, version, True),
                        reference=partial(gemv, fmt, version, False),
                        tolerance=dname,
                        row=row,
                        tags=tags if dname == "bf16" else (),
                    )
                )
    for i, (n, k) in enumerate(NVFP4_SHAPES):
        tags = ("small",) if i == 1 else ()
        cases.append(
            KernelCase(
                name=f"quant/nvfp4-dequant/bf16/n{n}-k{k}",
                arm="dequant",
                flag="VT_DEQUANT_KERNEL",
                dtype=torch.bfloat16,
                make=partial(nvfp4_inputs, n=n, k=k, dtype=torch.bfloat16),
                kernel=partial(dequant, "nvfp4", 0, True),
                reference=partial(dequant, "nvfp4", 0, False),
                tolerance="exact",
                row="QUANT-NVFP4",
                tags=tags,
            )
        )
        for dname, dtype in X_DTYPES.items():
            cases.append(
                KernelCase(
                    name=f"quant/nvfp4-gemv/{dname}/n{n}-k{k}",
                    arm="dequant-gemv",
                    flag="VT_DEQUANT_GEMV",
                    dtype=dtype,
                    make=partial(nvfp4_inputs, n=n, k=k, dtype=dtype),
                    kernel=partial(gemv, "nvfp4", 0, True),
                    reference=partial(gemv, "nvfp4", 0, False),
                    tolerance=dname,
                    row="QUANT-NVFP4",
                    tags=tags if dname == "bf16" else (),
                )
            )
    return cases


CASES: list[KernelCase] = _cases()
