"""Numerics cases for the decode step's fused launches (row ENGINE-PERF): the prologue GEMVs (residual add + RMSNorm,
SiLU-and-mul; gemv_prologue.cuh), the GEMV under programmatic dependent launch, and q/k norm + RoPE + KV store in one
launch (rope.cuh). Each fused kernel is held to the torch reference within its dtype's tolerance, and bit for bit
("exact") to the default kernels it replaces run one after another."""

from __future__ import annotations

from functools import partial
from typing import Any

import torch

from engine.cuda import act, gemv, kv_store, norm, rope
from engine.gates.cases import Inputs, KernelCase
from engine.ops import gemv as ref_gemv
from engine.ops import rope as ref_rope

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
EPS = 1e-6
THETA = 1_000_000.0
ROW = "ENGINE-PERF"
# (rows, out_features, in_features): Qwen3-0.6B's q/k/v and gate/up at decode, a few rows, an odd N, K 2048
NORM_SHAPES = ((1, 4096, 1024), (1, 6144, 1024), (3, 769, 1024), (8, 83, 2048), (2, 4099, 264))
# (rows, out_features, intermediate): the down projection, a few rows, odd sizes
ACT_SHAPES = ((1, 1024, 3072), (4, 1024, 3072), (2, 83, 1000), (1, 4099, 264))
# (rows, out_features, in_features) of the persistent GEMV: q/k/v, gate/up, the tied head, a few rows, odd N;
# fp32 K 1024 is past one batch of loads (the launcher keeps the fast path: still the same bits)
PERSISTENT_SHAPES = ((1, 4096, 1024), (1, 6144, 1024), (1, 151936, 1024), (3, 9001, 1024), (8, 4099, 512))
# (rows, 2 * intermediate, in_features) of the GLU GEMV: Qwen3-0.6B's gate/up, a few rows, a small K, with a bias
GLU_SHAPES = ((1, 6144, 1024), (3, 6144, 1024), (8, 4224, 264), (2, 17408, 1024))
# (tokens, heads, kv_heads, head_dim): a decode token of Qwen3-0.6B, a few tokens, an odd head_dim
QKV_SHAPES = ((1, 16, 8, 128), (7, 8, 2, 64), (5, 3, 1, 18), (3, 32, 8, 256))
SMALL = {(3, 769, 1024), (2, 83, 1000), (5, 3, 1, 18)}


def norm_inputs(
    seed: int, device: torch.device, *, dtype: torch.dtype, m: int, n: int, k: int, first: bool, bias: bool
) -> Inputs:
    g = torch.Generator().manual_seed(seed)
    return {
        "x": (torch.randn(m, k, generator=g) * 2).to(dtype).to(device),
        "residual": None if first else torch.randn(m, k, generator=g).to(dtype).to(device),
        "norm_weight": (torch.rand(k, generator=g) + 0.5).to(dtype).to(device),
        "weight": (torch.randn(n, k, generator=g) / k**0.5).to(dtype).to(device),
        "bias": torch.randn(n, generator=g).to(dtype).to(device) if bias else None,
    }


def _norm_args(x: Inputs) -> tuple:
    return x["x"], x["residual"], x["norm_weight"], EPS, x["weight"], x["bias"]


def _joined(y: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:  # [rows, n + k]: y, then the new residual
    return torch.cat([y, residual], dim=-1)


def run_norm_gemv(pdl: bool, x: Inputs) -> torch.Tensor:
    args = (x["x"], x["residual"], x["norm_weight"], EPS, x["weight"], x["bias"])
    return _joined(*gemv.add_rms_norm_linear(*args, pdl=pdl))


def ref_norm_gemv(x: Inputs) -> torch.Tensor:
    return _joined(*ref_gemv.add_rms_norm_linear(*_norm_args(x)))


def two_kernels_norm_gemv(x: Inputs) -> torch.Tensor:
    """The default arms one after another: the norm kernel, then the GEMV kernel."""
    if x["residual"] is None:
        normed, residual = norm.rms_norm(x["x"], x["norm_weight"], EPS), x["x"]
    else:
        normed, residual = norm.fused_add_rms_norm(x["x"], x["residual"], x["norm_weight"], EPS)
    return _joined(gemv.linear(normed, x["weight"], x["bias"]), residual)


def run_glu(pdl: bool, x: Inputs) -> torch.Tensor:
    return gemv.linear_silu_mul(x["x"], x["weight"], x["bias"], pdl=pdl)


def ref_glu(x: Inputs) -> torch.Tensor:
    return ref_gemv.linear_silu_mul(x["x"], x["weight"], x["bias"])


def two_kernels_glu(x: Inputs) -> torch.Tensor:
    return act.silu_and_mul(gemv.linear(x["x"], x["weight"], x["bias"]))


def run_norm_glu(pdl: bool, x: Inputs) -> torch.Tensor:
    args = (x["x"], x["residual"], x["norm_weight"], EPS, x["weight"], x["bias"])
    return _joined(*gemv.add_rms_norm_linear(*args, pdl=pdl, glu=True))


def ref_norm_glu(x: Inputs) -> torch.Tensor:
    return _joined(*ref_gemv.add_rms_norm_linear_silu_mul(*_norm_args(x)))


def three_kernels_norm_glu(x: Inputs) -> torch.Tensor:
    """The default arms one after another: the norm kernel, the GEMV kernel, the SiLU-and-mul kernel."""
    if x["residual"] is None:
        normed, residual = norm.rms_norm(x["x"], x["norm_weight"], EPS), x["x"]
    else:
        normed, residual = norm.fused_add_rms_norm(x["x"], x["residual"], x["norm_weight"], EPS)
    return _joined(act.silu_and_mul(gemv.linear(normed, x["weight"], x["bias"])), residual)


def act_inputs(seed: int, device: torch.device, *, dtype: torch.dtype, m: int, n: int, k: int) -> Inputs:
    g = torch.Generator().manual_seed(seed)
    return {
        "gate_up": (torch.randn(m, 2 * k, generator=g) * 2).to(dtype).to(device),
        "weight": (torch.randn(n, k, generator=g) / k**0.5).to(dtype).to(device),
    }


def run_act_gemv(pdl: bool, x: Inputs) -> torch.Tensor:
    return gemv.silu_mul_linear(x["gate_up"], x["weight"], pdl=pdl)


def ref_act_gemv(x: Inputs) -> torch.Tensor:
    return ref_gemv.silu_mul_linear(x["gate_up"], x["weight"])


def two_kernels_act_gemv(x: Inputs) -> torch.Tensor:
    return gemv.linear(act.silu_and_mul(x["gate_up"]), x["weight"])


def run_gemv_pdl(x: Inputs) -> torch.Tensor:
    return gemv.linear(x["x"], x["weight"], x["bias"], pdl=True)


def run_gemv_persistent(pdl: bool, x: Inputs) -> torch.Tensor:
    return gemv.linear(x["x"], x["weight"], x["bias"], pdl=pdl, persistent=True)


def run_gemv_plain(x: Inputs) -> torch.Tensor:
    return gemv.linear(x["x"], x["weight"], x["bias"])


def ref_linear(x: Inputs) -> torch.Tensor:
    return ref_gemv.linear(x["x"], x["weight"], x["bias"])


BLOCK = 16  # cache block size of the q/k/v cases


def qkv_inputs(seed: int, device: torch.device, *, dtype: torch.dtype, t: int, hq: int, hkv: int, d: int) -> Inputs:
    g = torch.Generator().manual_seed(seed)
    positions = torch.randint(0, 40_000, (t,), generator=g).to(device)
    cos, sin = ref_rope.rope_cos_sin(positions, d, THETA, dtype)
    merged = (torch.randn(t, (hq + 2 * hkv) * d, generator=g) * 2).to(dtype).to(device)  # one q/k/v GEMM row
    blocks = t // BLOCK + 3
    slots = torch.randperm(blocks * BLOCK, generator=g)[:t]
    slots[t // 2] = -1  # a padding token: nothing stored
    return {
        "merged": merged,
        "sizes": (hq * d, hkv * d, hkv * d),
        "heads": (hq, hkv, d),
        "q_weight": (torch.rand(d, generator=g) + 0.5).to(dtype).to(device),
        "k_weight": (torch.rand(d, generator=g) + 0.5).to(dtype).to(device),
        "cos": cos,
        "sin": sin,
        "cache": torch.randn(blocks, BLOCK, hkv, d, generator=g).to(dtype).to(device),  # stale contents
        "slots": slots.to(device),
    }


def _qkv_args(x: Inputs) -> tuple[Any, ...]:
    """q, k, v as views of the merged row (token stride: the merged width), fresh caches with the stale contents."""
    t = x["merged"].shape[0]
    hq, hkv, d = x["heads"]
    q, k, v = x["merged"].split(x["sizes"], dim=-1)
    q, k, v = q.view(t, hq, d), k.view(t, hkv, d), v.view(t, hkv, d)
    return q, k, v, x["q_weight"], x["k_weight"], x["cos"], x["sin"], EPS, x["cache"].clone(), x["cache"].clone()


def _qkv_out(q: torch.Tensor, k: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
    """[1, everything]: q and k after norm and RoPE, then both whole caches (stored slots and the untouched ones)."""
    return torch.cat([q.flatten(), k.flatten(), k_cache.flatten(), v_cache.flatten()])[None]


def run_qkv(x: Inputs) -> torch.Tensor:
    args = _qkv_args(x)
    q, k = rope.qkv_norm_rope_store(
        args[0], args[1], args[2], args[3], args[4], args[5], args[6], EPS, args[8], args[9], x["slots"]
    )
    return _qkv_out(q, k, args[8], args[9])


def ref_qkv(x: Inputs) -> torch.Tensor:
    args = _qkv_args(x)
    q, k = ref_rope.qkv_norm_rope_store(
        args[0], args[1], args[2], args[3], args[4], args[5], args[6], EPS, args[8], args[9], x["slots"]
    )
    return _qkv_out(q, k, args[8], args[9])


def three_kernels_qkv(x: Inputs) -> torch.Tensor:
    """The default arms one after another: q norm+RoPE, k norm+RoPE, then the KV store."""
    q, k, v, qw, kw, cos, sin, eps, kc, vc = _qkv_args(x)
    q, k = rope.qk_norm_rope(q, qw, cos, sin, eps), rope.qk_norm_rope(k, kw, cos, sin, eps)
    kv_store.store_kv(k, v, kc, vc, x["slots"])
    return _qkv_out(q, k, kc, vc)


def _case(name: str, arm: str, flag: str, dtype: torch.dtype, make, kernel, reference, tol: str, small: bool):
    return KernelCase(name, arm, flag, dtype, make, kernel, reference, tol, ROW, ("small",) if small else ())


def build_cases() -> list[KernelCase]:
    cases = []
    for dt, dtype in DTYPES.items():
        elt = torch.empty((), dtype=dtype).element_size()
        for m, n, k in NORM_SHAPES:
            if m * k * elt > gemv.MAX_STAGED_BYTES:  # the arm declines (prologue_fits): the table runs two launches
                continue
            for first in (False, True):
                bias = n == 769
                make = partial(norm_inputs, dtype=dtype, m=m, n=n, k=k, first=first, bias=bias)
                base = f"fused/norm_gemv/{dt}/m{m}/n{n}/k{k}" + ("/first" if first else "") + ("/bias" if bias else "")
                small = (m, n, k) in SMALL and not first
                cases += [
                    _case(
                        base,
                        "prologue",
                        "VT_NORM_GEMV",
                        dtype,
                        make,
                        partial(run_norm_gemv, False),
                        ref_norm_gemv,
                        dt,
                        small,
                    ),
                    _case(
                        base + "/exact",
                        "prologue",
                        "VT_NORM_GEMV",
                        dtype,
                        make,
                        partial(run_norm_gemv, False),
                        two_kernels_norm_gemv,
                        "exact",
                        False,
                    ),
                    _case(
                        base + "/pdl",
                        "prologue_pdl",
                        "VT_GEMV_PDL",
                        dtype,
                        make,
                        partial(run_norm_gemv, True),
                        two_kernels_norm_gemv,
                        "exact",
                        False,
                    ),
                ]
            if (m, n, k) != (2, 4099, 264):
                make = partial(norm_inputs, dtype=dtype, m=m, n=n, k=k, first=True, bias=False)
                name = f"fused/gemv_pdl/{dt}/m{m}/n{n}/k{k}"
                cases += [
                    _case(name, "gemv_pdl", "VT_GEMV_PDL", dtype, make, run_gemv_pdl, ref_linear, dt, False),
                    _case(
                        name + "/exact",
                        "gemv_pdl",
                        "VT_GEMV_PDL",
                        dtype,
                        make,
                        run_gemv_pdl,
                        run_gemv_plain,
                        "exact",
                        False,
                    ),
                ]
        for m, n, k in PERSISTENT_SHAPES:
            make = partial(norm_inputs, dtype=dtype, m=m, n=n, k=k, first=True, bias=n == 9001)
            name = f"fused/gemv_persistent/{dt}/m{m}/n{n}/k{k}" + ("/bias" if n == 9001 else "")
            cases += [
                _case(
                    name,
                    "gemv_persistent",
                    "VT_GEMV_PERSISTENT",
                    dtype,
                    make,
                    partial(run_gemv_persistent, False),
                    ref_linear,
                    dt,
                    False,
                ),
                _case(
                    name + "/exact",
                    "gemv_persistent",
                    "VT_GEMV_PERSISTENT",
                    dtype,
                    make,
                    partial(run_gemv_persistent, False),
                    run_gemv_plain,
                    "exact",
                    False,
                ),
                _case(
                    name + "/pdl",
                    "gemv_persistent_pdl",
                    "VT_GEMV_PDL",
                    dtype,
                    make,
                    partial(run_gemv_persistent, True),
                    run_gemv_plain,
                    "exact",
                    False,
                ),
            ]
        for m, n, k in GLU_SHAPES:
            for first in (False, True):
                bias = n == 4224
                make = partial(norm_inputs, dtype=dtype, m=m, n=n, k=k, first=first, bias=bias)
                tail = f"{dt}/m{m}/n{n}/k{k}" + ("/first" if first else "") + ("/bias" if bias else "")
                cases += [
                    _case(
                        f"fused/norm_glu_gemv/{tail}",
                        "prologue_glu",
                        "VT_GLU_GEMV",
                        dtype,
                        make,
                        partial(run_norm_glu, False),
                        ref_norm_glu,
                        dt,
                        False,
                    ),
                    _case(
                        f"fused/norm_glu_gemv/{tail}/exact",
                        "prologue_glu",
                        "VT_GLU_GEMV",
                        dtype,
                        make,
                        partial(run_norm_glu, False),
                        three_kernels_norm_glu,
                        "exact",
                        False,
                    ),
                    _case(
                        f"fused/norm_glu_gemv/{tail}/pdl",
                        "prologue_glu_pdl",
                        "VT_GEMV_PDL",
                        dtype,
                        make,
                        partial(run_norm_glu, True),
                        three_kernels_norm_glu,
                        "exact",
                        False,
                    ),
                ]
                if first:  # the plain GLU GEMV reads x as it is (the residual is not used)
                    cases += [
                        _case(
                            f"fused/glu_gemv/{tail}",
                            "glu",
                            "VT_GLU_GEMV",
                            dtype,
                            make,
                            partial(run_glu, False),
                            ref_glu,
                            dt,
                            False,
                        ),
                        _case(
                            f"fused/glu_gemv/{tail}/exact",
                            "glu",
                            "VT_GLU_GEMV",
                            dtype,
                            make,
                            partial(run_glu, False),
                            two_kernels_glu,
                            "exact",
                            False,
                        ),
                        _case(
                            f"fused/glu_gemv/{tail}/pdl",
                            "glu_pdl",
                            "VT_GEMV_PDL",
                            dtype,
                            make,
                            partial(run_glu, True),
                            two_kernels_glu,
                            "exact",
                            False,
                        ),
                    ]
        for m, n, k in ACT_SHAPES:
            if m * k * elt > gemv.MAX_STAGED_BYTES:
                continue
            make = partial(act_inputs, dtype=dtype, m=m, n=n, k=k)
            base = f"fused/act_gemv/{dt}/m{m}/n{n}/k{k}"
            small = (m, n, k) in SMALL
            cases += [
                _case(
                    base, "prologue", "VT_ACT_GEMV", dtype, make, partial(run_act_gemv, False), ref_act_gemv, dt, small
                ),
                _case(
                    base + "/exact",
                    "prologue",
                    "VT_ACT_GEMV",
                    dtype,
                    make,
                    partial(run_act_gemv, False),
                    two_kernels_act_gemv,
                    "exact",
                    False,
                ),
                _case(
                    base + "/pdl",
                    "prologue_pdl",
                    "VT_GEMV_PDL",
                    dtype,
                    make,
                    partial(run_act_gemv, True),
                    two_kernels_act_gemv,
                    "exact",
                    False,
                ),
            ]
        for t, hq, hkv, d in QKV_SHAPES:
            make = partial(qkv_inputs, dtype=dtype, t=t, hq=hq, hkv=hkv, d=d)
            base = f"fused/qkv_rope_store/{dt}/t{t}/h{hq}/kv{hkv}/d{d}"
            small = (t, hq, hkv, d) in SMALL
            cases += [
                _case(base, "fused", "VT_QKV_ROPE_STORE", dtype, make, run_qkv, ref_qkv, dt, small),
                _case(
                    base + "/exact",
                    "fused",
                    "VT_QKV_ROPE_STORE",
                    dtype,
                    make,
                    run_qkv,
                    three_kernels_qkv,
                    "exact",
                    False,
                ),
            ]
    return cases


CASES = build_cases()
