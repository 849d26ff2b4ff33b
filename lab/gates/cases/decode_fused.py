"""Numerics cases for the decode step's fused launches (row ENGINE-PERF): the prologue GEMVs (residual add + RMSNorm;
gemv_prologue.cuh), the GLU epilogue GEMVs, the GEMV under programmatic dependent launch, and q/k norm + RoPE + KV store in one
launch (rope.cuh). Each fused kernel is held to the torch reference within its dtype's tolerance, and bit for bit
("exact") to the default kernels it replaces run one after another."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from engine.cuda import act, gemv, kv_store, norm, rope
from engine.ops import gemv as ref_gemv
from engine.ops import rope as ref_rope
from lab.gates.cases import Inputs, KernelCase

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
EPS = 1e-6
THETA = 1_000_000.0
ROW = "ENGINE-PERF"
# (rows, out_features, in_features): Qwen3-0.6B's q/k/v and gate/up at decode, a few rows, an odd N, K 2048
NORM_SHAPES = ((1, 4096, 1024), (1, 6144, 1024), (3, 769, 1024), (8, 83, 2048), (2, 4099, 264))
# (rows, 2 * intermediate, in_features) of the GLU GEMV: Qwen3-0.6B's gate/up, a few rows, a small K, with a bias
GLU_SHAPES = ((1, 6144, 1024), (3, 6144, 1024), (8, 4224, 264), (2, 17408, 1024))
# (tokens, heads, kv_heads, head_dim): a decode token of Qwen3-0.6B, a few tokens, an odd head_dim
QKV_SHAPES = ((1, 16, 8, 128), (7, 8, 2, 64), (5, 3, 1, 18), (3, 32, 8, 256))
SMALL = {(3, 769, 1024), (5, 3, 1, 18)}


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


def norm_args(x: Inputs) -> tuple[Any, Any, Any, float, Any, Any]:  # the norm forms' arguments, in their order
    return x["x"], x["residual"], x["norm_weight"], EPS, x["weight"], x["bias"]


def _joined(y: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:  # [rows, n + k]: y, then the new residual
    return torch.cat([y, residual], dim=-1)


def run_norm_gemv(pdl: bool, x: Inputs, glu: bool = False) -> torch.Tensor:
    return _joined(*gemv.add_rms_norm_linear(*norm_args(x), pdl=pdl, glu=glu))


def ref_norm_gemv(x: Inputs) -> torch.Tensor:
    return _joined(*ref_gemv.add_rms_norm_linear(*norm_args(x)))


def two_kernels_norm_gemv(x: Inputs, then: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """The default arms one after another: the norm kernel, then the GEMV kernel (then `then`)."""
    normed, residual = ref_gemv.pre_norm(norm, x["x"], x["residual"], x["norm_weight"], EPS)
    y = gemv.linear(normed, x["weight"], x["bias"])
    return _joined(then(y) if then else y, residual)


def run_glu(pdl: bool, x: Inputs) -> torch.Tensor:
    return gemv.linear_silu_mul(x["x"], x["weight"], x["bias"], pdl=pdl)


def ref_glu(x: Inputs) -> torch.Tensor:
    return ref_gemv.linear_silu_mul(x["x"], x["weight"], x["bias"])


def two_kernels_glu(x: Inputs) -> torch.Tensor:
    return act.silu_and_mul(gemv.linear(x["x"], x["weight"], x["bias"]))


def run_norm_glu(pdl: bool, x: Inputs) -> torch.Tensor:
    return run_norm_gemv(pdl, x, glu=True)


def ref_norm_glu(x: Inputs) -> torch.Tensor:
    return _joined(*ref_gemv.add_rms_norm_linear_silu_mul(*norm_args(x)))


def three_kernels_norm_glu(x: Inputs) -> torch.Tensor:
    """The default arms one after another: the norm kernel, the GEMV kernel, the SiLU-and-mul kernel."""
    return two_kernels_norm_gemv(x, then=act.silu_and_mul)


def run_gemv_pdl(x: Inputs) -> torch.Tensor:
    return gemv.linear(x["x"], x["weight"], x["bias"], pdl=True)


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


def pair(
    base: str, arm: str, flag: str, dt: str, make, kernel, against: tuple, small: bool = False
) -> list[KernelCase]:
    """`kernel` within the dtype's tolerance of `against`'s torch reference (tagged `small`: a sanitizer case), and
    bitwise to its default kernels ("/exact")."""
    (reference, default), dtype = against, DTYPES[dt]
    return [
        _case(base, arm, flag, dtype, make, kernel, reference, dt, small),
        _case(base + "/exact", arm, flag, dtype, make, kernel, default, "exact", False),
    ]


def trio(base: str, arm: str, flag: str, dt: str, make, run, against: tuple, small: bool = False) -> list[KernelCase]:
    """`pair` of `run(False, inputs)`, then `run(True, inputs)`, the programmatic dependent launch (`arm`_pdl),
    bitwise to the default kernels too ("/pdl")."""
    pdl = partial(run, True)
    last = _case(base + "/pdl", arm + "_pdl", "VT_GEMV_PDL", DTYPES[dt], make, pdl, against[1], "exact", False)
    return [*pair(base, arm, flag, dt, make, partial(run, False), against, small), last]


# (the torch reference, the default kernels one after another) of each form
NORM_GEMV = (ref_norm_gemv, two_kernels_norm_gemv)
NORM_GLU = (ref_norm_glu, three_kernels_norm_glu)
GLU = (ref_glu, two_kernels_glu)


@dataclass(frozen=True)
class PrologueArm:
    """One implementation of the norm and GLU GEMV forms as the cases name and run them: the fast-path kernels
    (gemv_prologue.cuh, gemv.cuh: `FAST`) or the streamed ones (gemv_stream.cuh)."""

    suffix: str  # of the case families and arms: "" or "_stream"
    norm_flag: str  # the flag of the norm forms' cases
    glu_flag: str  # the flag of the GLU forms' cases
    run_norm: Callable[[bool, Inputs], torch.Tensor]  # (pdl, inputs) -> [rows, n + k]: y, then the new residual
    run_norm_glu: Callable[[bool, Inputs], torch.Tensor]
    run_glu: Callable[[bool, Inputs], torch.Tensor]


FAST = PrologueArm("", "VT_NORM_GEMV", "VT_GLU_GEMV", run_norm_gemv, run_norm_glu, run_glu)


def _inputs(
    dt: str, m: int, n: int, k: int, first: bool, bias: bool
) -> tuple[str, Callable[[int, torch.device], Inputs]]:
    """A norm-form shape's name tail and its inputs."""
    tail = f"{dt}/m{m}/n{n}/k{k}" + ("/first" if first else "") + ("/bias" if bias else "")
    return tail, partial(norm_inputs, dtype=DTYPES[dt], m=m, n=n, k=k, first=first, bias=bias)


def norm_trios(arm: PrologueArm, dt: str, m: int, n: int, k: int, small: bool) -> list[KernelCase]:
    """The add + RMSNorm prologue GEMV of one shape, after a layer (a residual) and first (none; never `small`)."""
    cases = []
    for first in (False, True):
        tail, make = _inputs(dt, m, n, k, first, n == 769)
        name, fast_arm = f"fused/norm_gemv{arm.suffix}/{tail}", "prologue" + arm.suffix
        cases += trio(name, fast_arm, arm.norm_flag, dt, make, arm.run_norm, NORM_GEMV, small and not first)
    return cases


def glu_trios(arm: PrologueArm, dt: str, m: int, n: int, k: int) -> list[KernelCase]:
    """The norm + GLU GEMV of one gate/up shape, after a layer and first; the plain GLU GEMV (x read as it is) once."""
    cases = []
    for first in (False, True):
        tail, make = _inputs(dt, m, n, k, first, n == 4224)
        name, fast_arm = f"fused/norm_glu_gemv{arm.suffix}/{tail}", "prologue_glu" + arm.suffix
        cases += trio(name, fast_arm, arm.glu_flag, dt, make, arm.run_norm_glu, NORM_GLU)
        if first:  # the residual is not used
            name = f"fused/glu_gemv{arm.suffix}/{tail}"
            cases += trio(name, "glu" + arm.suffix, arm.glu_flag, dt, make, arm.run_glu, GLU)
    return cases


def build_cases() -> list[KernelCase]:
    cases = []
    for dt, dtype in DTYPES.items():
        elt = torch.empty((), dtype=dtype).element_size()
        for m, n, k in NORM_SHAPES:
            if m * k * elt > gemv.MAX_STAGED_BYTES:  # the arm declines (supports_prologue): the table runs two launches
                continue
            cases += norm_trios(FAST, dt, m, n, k, (m, n, k) in SMALL)
            if (m, n, k) != (2, 4099, 264):
                make = partial(norm_inputs, dtype=dtype, m=m, n=n, k=k, first=True, bias=False)
                name, plain = f"fused/gemv_pdl/{dt}/m{m}/n{n}/k{k}", (ref_linear, run_gemv_plain)
                cases += pair(name, "gemv_pdl", "VT_GEMV_PDL", dt, make, run_gemv_pdl, plain)
        for m, n, k in GLU_SHAPES:
            cases += glu_trios(FAST, dt, m, n, k)
        for t, hq, hkv, d in QKV_SHAPES:
            make = partial(qkv_inputs, dtype=dtype, t=t, hq=hq, hkv=hkv, d=d)
            name, small = f"fused/qkv_rope_store/{dt}/t{t}/h{hq}/kv{hkv}/d{d}", (t, hq, hkv, d) in SMALL
            cases += pair(name, "fused", "VT_QKV_ROPE_STORE", dt, make, run_qkv, (ref_qkv, three_kernels_qkv), small)
    return cases


CASES = build_cases()
