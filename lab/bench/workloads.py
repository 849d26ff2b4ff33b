"""Benchmark workloads: inputs on a device, the engine op that runs them, the bytes they must move,
and the peers they are measured against.

Bytes that must move count each input read once and each output written once, so achieved bytes per
second over the measured copy bandwidth is the fraction of the ceiling a kernel reaches."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F

from engine import flags, kernels
from engine.flags import FlagSnapshot
from engine.ops.rope import rope_cos_sin
from lab.bench import step_workload
from lab.bench.attn_peers import contiguous, flashinfer_prepare, flashinfer_run, sdpa
from lab.bench.figures import PEER_SHAPES

Shape = dict[str, int]
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


@dataclass(frozen=True)
class Workload:
    name: str
    flags: tuple[str, ...]  # the flags whose A/B this workload measures
    defaults: Shape
    make: Callable[[Shape, torch.device, torch.dtype, int], tuple]
    run: Callable[..., Any]  # run(snapshot, *inputs): the engine's op under one arm's flags
    bytes_moved: Callable[[Shape, torch.dtype], int]
    peers: dict[str, tuple[Callable, Callable]] = field(default_factory=dict)  # name -> (prepare(args), run)
    arms: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> flag settings for that arm
    # name -> (op, arm): a kernel-table arm outside the default order, run by name (`kernels.naming`)
    by_name: dict[str, tuple[str, str]] = field(default_factory=dict)
    shape_sets: dict[str, tuple[Shape, ...]] = field(default_factory=dict)  # name -> shapes over the defaults
    # reset(*inputs): undo what a call changed (a recurrent state), so two arms' outputs compare from one start
    reset: Callable[..., None] | None = None

    @property
    def arm_names(self) -> list[str]:
        """Every arm a benchmark may ask for: those set by flags, then those named in the table."""
        return [*self.arms, *self.by_name]

    def arm(self, name: str, base: FlagSnapshot) -> Callable[..., Any]:
        """`run` bound to the snapshot of arm `name`: `base` with the arm's flag settings, or naming its table arm."""
        if name in self.by_name:
            return partial(self.run, kernels.naming(base, *self.by_name[name]))
        return partial(self.run, with_settings(base, self.arms[name]))

    def default_arm(self) -> str | None:
        """The arm whose settings are what the flags' defaults already are: the one the engine runs out of the box
        (None when no arm, or more than one, says so)."""
        defaults = FlagSnapshot.defaults()
        same = [n for n, s in self.arms.items() if with_settings(defaults, s) == defaults]
        return same[0] if len(same) == 1 else None


def with_settings(base: FlagSnapshot, settings: dict[str, str]) -> FlagSnapshot:
    """`base` with flag settings written as the environment writes them (`{"VT_GEMV": "0"}`)."""
    return base.with_(**{name: flags.parse(name, text) for name, text in settings.items()})


def parse_shape(text: str | None, defaults: Shape) -> Shape:
    """`batch=64,ctx=4096` over the workload's defaults; unknown keys are errors naming the known ones."""
    shape = dict(defaults)
    for part in filter(None, (text or "").split(",")):
        key, sep, val = part.partition("=")
        if not sep or key not in defaults:
            raise ValueError(f"--shape {part!r}: expected KEY=INT with KEY in {sorted(defaults)}")
        shape[key] = int(val)
    return shape


def _elt(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


# --- paged decode attention --------------------------------------------------------------------------


def _attn_make(s: Shape, device: torch.device, dtype: torch.dtype, seed: int) -> tuple:
    g = torch.Generator(device="cpu").manual_seed(seed)
    blocks_per_seq = math.ceil(s["ctx"] / s["block"])
    num_blocks = s["batch"] * blocks_per_seq
    # Blocks are scattered across the cache, as after real allocation and free churn.
    table = torch.randperm(num_blocks, generator=g).view(s["batch"], blocks_per_seq).to(torch.int32)
    kv_shape = (num_blocks, s["block"], s["hkv"], s["d"])
    k = torch.randn(kv_shape, generator=g).to(dtype)
    v = torch.randn(kv_shape, generator=g).to(dtype)
    q = torch.randn(s["batch"], s["hq"], s["d"], generator=g).to(dtype)
    lens = torch.full((s["batch"],), s["ctx"], dtype=torch.int32)
    return tuple(t.to(device) for t in (q, k, v, table, lens)) + (s["d"] ** -0.5,)


def _attn_run(snapshot, q, k, v, table, lens, scale):
    return kernels.paged_decode_attention(snapshot, q, k, v, table, lens, scale)


def _attn_bytes(s: Shape, dtype: torch.dtype) -> int:
    kv = 2 * s["batch"] * s["ctx"] * s["hkv"] * s["d"]
    q_out = 2 * s["batch"] * s["hq"] * s["d"]
    return (kv + q_out) * _elt(dtype) + s["batch"] * (math.ceil(s["ctx"] / s["block"]) + 1) * 4


_FLEX: dict = {}


def _flex(q4, kc, vc, scale):
    if "fn" not in _FLEX:
        # why: pulls in torch.compile
        from torch.nn.attention.flex_attention import flex_attention

        _FLEX["fn"] = torch.compile(flex_attention, dynamic=False)
    return _FLEX["fn"](q4, kc, vc, scale=scale, enable_gqa=True)


def _gather_then_sdpa(q, k, v, table, lens, scale):
    q4, kc, vc, scale = contiguous(q, k, v, table, lens, scale)
    return F.scaled_dot_product_attention(q4, kc, vc, scale=scale, enable_gqa=True)


ATTN = Workload(
    name="attn-decode",
    flags=(
        "VT_ATTN_TILED",
        "VT_ATTN_TILED_FUSED",
        "VT_ATTN_PV_PIPELINED",
        "VT_ATTN_PDL",
        "VT_ATTN_ONEPASS",
        "VT_KERNELS",
    ),
    defaults={"batch": 64, "ctx": 4096, "hq": 32, "hkv": 8, "d": 128, "block": 32},
    make=_attn_make,
    run=_attn_run,
    bytes_moved=_attn_bytes,
    peers={
        "sdpa-flash": (contiguous, sdpa("FLASH_ATTENTION")),
        "sdpa-cudnn": (contiguous, sdpa("CUDNN_ATTENTION")),
        "sdpa-efficient": (contiguous, sdpa("EFFICIENT_ATTENTION")),
        "flex-compiled": (contiguous, _flex),
        "gather-then-sdpa": (lambda *a: a, _gather_then_sdpa),
        # the same paged cache and block tables; with tensor cores FlashInfer runs its prefill kernel
        "flashinfer-tc": (flashinfer_prepare(True), flashinfer_run),
        "flashinfer": (flashinfer_prepare(False), flashinfer_run),
    },
    # the tiled arm is ON by default and takes precedence: the generic arm turns it off; the by-name arms (outside
    # the default order: docs/BENCHMARKS.md, "Arm outcomes") are named in the table whatever the flags
    by_name={
        "warp-split": ("paged_decode_attention", "warp_d128"),
        "split-kv-swap": ("paged_decode_attention", "splitkv_swap"),
    },
    arms={
        "generic": {"VT_ATTN_TILED": "0"},
        "tiled": {
            "VT_ATTN_TILED": "1",
            "VT_ATTN_TILED_FUSED": "0",
            "VT_ATTN_PV_PIPELINED": "0",
            "VT_ATTN_ONEPASS": "0",
        },
        "tiled-fused": {
            "VT_ATTN_TILED": "1",
            "VT_ATTN_TILED_FUSED": "1",
            "VT_ATTN_PV_PIPELINED": "0",
            "VT_ATTN_ONEPASS": "0",
        },
        "tiled-pipelined": {
            "VT_ATTN_TILED": "1",
            "VT_ATTN_TILED_FUSED": "0",
            "VT_ATTN_PV_PIPELINED": "1",
            "VT_ATTN_PDL": "0",
            "VT_ATTN_ONEPASS": "0",
        },
        "tiled-pipelined-pdl": {
            "VT_ATTN_TILED": "1",
            "VT_ATTN_TILED_FUSED": "0",
            "VT_ATTN_PV_PIPELINED": "1",
            "VT_ATTN_PDL": "1",
            "VT_ATTN_ONEPASS": "0",
        },
        "tiled-onepass": {"VT_ATTN_TILED": "1", "VT_ATTN_ONEPASS": "1"},
    },
    # the six shapes of the peer comparison (issue #19): `bench bandwidth --shapes peers`
    shape_sets={"peers": PEER_SHAPES},
)


# --- M=1 GEMV --------------------------------------------------------------------------------------------


def _gemv_make(s: Shape, device: torch.device, dtype: torch.dtype, seed: int) -> tuple:
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(1, s["k"], generator=g).to(dtype)
    w = (torch.randn(s["n"], s["k"], generator=g) * s["k"] ** -0.5).to(dtype)
    return x.to(device), w.to(device)


def _gemv_run(snapshot, x, w):
    return kernels.linear(snapshot, x, w)


# Qwen3-0.6B's five decode projections (q/k/v, o_proj, gate/up, down, the tied head): the `qwen3` shape sets of the
# GEMV (one row) and GEMM (32 rows) workloads (`bench bandwidth --shapes qwen3`)
QWEN3_PROJECTIONS = (
    {"n": 4096, "k": 1024},
    {"n": 1024, "k": 2048},
    {"n": 6144, "k": 1024},
    {"n": 1024, "k": 3072},
    {"n": 151936, "k": 1024},
)

GEMV = Workload(
    name="gemv",
    flags=("VT_GEMV", "VT_GEMV_PDL", "VT_GEMV_STREAM"),
    defaults={"n": 4096, "k": 4096},
    make=_gemv_make,
    run=_gemv_run,
    bytes_moved=lambda s, dt: (s["n"] * s["k"] + s["k"] + s["n"]) * _elt(dt),
    peers={"F.linear": (lambda x, w: (x, w), F.linear)},
    arms={
        "reference": {"VT_GEMV": "0"},
        "gemv-kernel": {"VT_GEMV": "1", "VT_GEMV_PDL": "0"},
        "gemv-pdl": {"VT_GEMV": "1", "VT_GEMV_PDL": "1"},
        "gemv-stream": {"VT_GEMV": "1", "VT_GEMV_STREAM": "1", "VT_GEMV_PDL": "0"},
        "gemv-stream-pdl": {"VT_GEMV": "1", "VT_GEMV_STREAM": "1", "VT_GEMV_PDL": "1"},
    },
    shape_sets={"qwen3": QWEN3_PROJECTIONS},
)

# --- the decode step's projections at batch rows: past the GEMV's 8 rows `linear` runs F.linear (cuBLAS) --------


def _gemm_make(s: Shape, device: torch.device, dtype: torch.dtype, seed: int) -> tuple:
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(s["rows"], s["k"], generator=g).to(dtype)
    w = (torch.randn(s["n"], s["k"], generator=g) * s["k"] ** -0.5).to(dtype)
    return x.to(device), w.to(device)


GEMM = Workload(
    name="gemm",
    flags=(),  # no flag of its own: the kernel table's choice under the environment's flags
    defaults={"rows": 32, "n": 4096, "k": 1024},
    make=_gemm_make,
    run=_gemv_run,
    bytes_moved=lambda s, dt: (s["n"] * s["k"] + s["rows"] * (s["k"] + s["n"])) * _elt(dt),
    peers={"F.linear": (lambda x, w: (x, w), F.linear)},
    arms={"defaults": {}},
    # Qwen3-0.6B's decode projections at batch 32 (`bench bandwidth --workload gemm --shapes qwen3`)
    shape_sets={"qwen3": tuple({"rows": 32, **s} for s in QWEN3_PROJECTIONS)},
)

# --- the decode step's fused launches (ENGINE-PERF): each against the default kernels one after another ------
# Graph-timed over rotating input sets, so a PDL arm overlaps each call with the one before, as in a decode step.


def _norm_gemv_make(s: Shape, device: torch.device, dtype: torch.dtype, seed: int) -> tuple:
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(s["rows"], s["k"], generator=g).to(dtype)
    residual = torch.randn(s["rows"], s["k"], generator=g).to(dtype)
    norm_weight = (1 + 0.1 * torch.randn(s["k"], generator=g)).to(dtype)
    w = (torch.randn(s["n"], s["k"], generator=g) * s["k"] ** -0.5).to(dtype)
    return tuple(t.to(device) for t in (x, residual, norm_weight, w))


def _norm_gemv_run(snapshot, x, residual, norm_weight, w):
    return kernels.add_rms_norm_linear(snapshot, x, residual, norm_weight, 1e-6, w)[0]


NORM_GEMV = Workload(
    name="norm-gemv",
    flags=("VT_NORM_GEMV",),
    defaults={"rows": 1, "n": 4096, "k": 1024},  # Qwen3-0.6B's merged q/k/v at decode (gate/up: n=6144)
    make=_norm_gemv_make,
    run=_norm_gemv_run,
    # W once; x and residual read, the new residual written, the norm weight, y written
    bytes_moved=lambda s, dt: (s["n"] * s["k"] + 3 * s["rows"] * s["k"] + s["k"] + s["rows"] * s["n"]) * _elt(dt),
    arms={
        "two-launches": {"VT_NORM_GEMV": "0", "VT_GEMV_PDL": "0"},
        "prologue": {"VT_NORM_GEMV": "1", "VT_GEMV_PDL": "0"},
        "prologue-pdl": {"VT_NORM_GEMV": "1", "VT_GEMV_PDL": "1"},
    },
)


def _glu_gemv_run(snapshot, x, residual, norm_weight, w):
    return kernels.linear_silu_mul(snapshot, x, w)


def _norm_glu_gemv_run(snapshot, x, residual, norm_weight, w):
    return kernels.add_rms_norm_linear_silu_mul(snapshot, x, residual, norm_weight, 1e-6, w)[0]


def _glu_bytes(s: Shape, dt: torch.dtype) -> int:  # W once, x (and residual) read, the activation written
    return (s["n"] * s["k"] + 3 * s["rows"] * s["k"] + s["k"] + s["rows"] * s["n"] // 2) * _elt(dt)


GLU_GEMV = Workload(
    name="glu-gemv",
    flags=("VT_GLU_GEMV",),
    defaults={"rows": 1, "n": 6144, "k": 1024},  # Qwen3-0.6B's merged gate/up at decode
    make=_norm_gemv_make,
    run=_glu_gemv_run,
    bytes_moved=_glu_bytes,
    arms={"two-launches": {"VT_GLU_GEMV": "0"}, "glu": {"VT_GLU_GEMV": "1"}},
)
NORM_GLU_GEMV = Workload(
    name="norm-glu-gemv",
    flags=(),
    defaults={"rows": 1, "n": 6144, "k": 1024},
    make=_norm_gemv_make,
    run=_norm_glu_gemv_run,
    bytes_moved=_glu_bytes,
    arms={
        "three-launches": {"VT_NORM_GEMV": "0", "VT_GLU_GEMV": "0"},
        "norm-prologue": {"VT_NORM_GEMV": "1", "VT_GLU_GEMV": "0"},
        "norm-prologue-glu": {"VT_NORM_GEMV": "1", "VT_GLU_GEMV": "1"},
    },
)


def _qkv_make(s: Shape, device: torch.device, dtype: torch.dtype, seed: int) -> tuple:
    g = torch.Generator(device="cpu").manual_seed(seed)
    t, hq, hkv, d = s["tokens"], s["hq"], s["hkv"], s["d"]
    merged = torch.randn(t, (hq + 2 * hkv) * d, generator=g).to(dtype).to(device)
    q, k, v = merged.split((hq * d, hkv * d, hkv * d), dim=-1)
    blocks = max(4, 2 * t // s["block"] + 2)
    cache = torch.zeros(blocks, s["block"], hkv, d, dtype=dtype, device=device)
    slots = torch.randperm(blocks * s["block"], generator=g)[:t].to(device)
    cos, sin = rope_cos_sin(torch.randint(0, 4096, (t,), generator=g).to(device), d, 1e6, dtype)
    weights = [(1 + 0.1 * torch.randn(d, generator=g)).to(dtype).to(device) for _ in range(2)]
    return (q.view(t, hq, d), k.view(t, hkv, d), v.view(t, hkv, d), *weights, cos, sin, cache, cache.clone(), slots)


def _qkv_run(snapshot, q, k, v, q_weight, k_weight, cos, sin, k_cache, v_cache, slots):
    return kernels.qkv_norm_rope_store(snapshot, q, k, v, q_weight, k_weight, cos, sin, 1e-6, k_cache, v_cache, slots)[
        0
    ]


QKV_ROPE_STORE = Workload(
    name="qkv-rope-store",
    flags=("VT_QKV_ROPE_STORE",),
    defaults={"tokens": 1, "hq": 16, "hkv": 8, "d": 128, "block": 32},  # one decode token of Qwen3-0.6B
    make=_qkv_make,
    run=_qkv_run,
    # q, k, v read; q and k written; k and v stored; cos/sin read
    bytes_moved=lambda s, dt: s["tokens"] * ((3 * s["hq"] + 5 * s["hkv"]) * s["d"] + 2 * s["d"]) * _elt(dt),
    arms={"three-launches": {"VT_QKV_ROPE_STORE": "0"}, "fused": {"VT_QKV_ROPE_STORE": "1"}},
)

# --- residual add + RMSNorm (the decode step's norms) --------------------------------------------------


def _norm_make(s: Shape, device: torch.device, dtype: torch.dtype, seed: int) -> tuple:
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(s["tokens"], s["hidden"], generator=g).to(dtype)
    residual = torch.randn(s["tokens"], s["hidden"], generator=g).to(dtype)
    weight = (1 + 0.1 * torch.randn(s["hidden"], generator=g)).to(dtype)
    return x.to(device), residual.to(device), weight.to(device)


def _norm_run(snapshot, x, residual, weight):
    return kernels.fused_add_rms_norm(snapshot, x, residual, weight, 1e-6)[
        0
    ]  # both outputs are computed; the normed one is compared


NORM = Workload(
    name="rms-norm",
    flags=("VT_NORM_KERNEL",),
    defaults={"tokens": 1, "hidden": 1024},
    make=_norm_make,
    run=_norm_run,
    # x and residual read, the normed output and the new residual written, the weight read once
    bytes_moved=lambda s, dt: (4 * s["tokens"] * s["hidden"] + s["hidden"]) * _elt(dt),
    arms={"reference": {"VT_NORM_KERNEL": "0"}, "norm-kernel": {"VT_NORM_KERNEL": "1"}},
)

# --- the whole decode step (lab/bench/step_workload.py) ---------------------------------------------

STEP = Workload(
    name="decode-step",
    flags=("VT_MERGED_PROJ", "VT_QK_NORM_ROPE_FUSED", *step_workload.FUSED_ARMS),
    defaults=dict(step_workload.STEP_DEFAULTS),
    make=step_workload.make,
    run=step_workload.run,
    bytes_moved=step_workload.bytes_moved,
    arms={
        "defaults": {},
        "step-arms-off": {f: "0" for f in step_workload.STEP_ARMS},
        "fused-on": {f: "1" for f in step_workload.FUSED_ARMS},
    },
)

# --- M=1 dequant-GEMV: AWQ, GPTQ, NVFP4 (bytes counted from the packed weights) ------------------------

QUANT_DEFAULTS = {"n": 4096, "k": 4096, "group": 128}
# reference: the torch dequant then linear; dequant+linear: the engine's dequant kernel to a dense weight,
# then linear (the baseline a fused kernel must beat); dequant-gemv: the fused M=1 kernel.
QUANT_ARMS = {
    "reference": {"VT_DEQUANT_KERNEL": "0", "VT_DEQUANT_GEMV": "0"},
    "dequant+linear": {"VT_DEQUANT_KERNEL": "1", "VT_DEQUANT_GEMV": "0"},
    "dequant-gemv": {"VT_DEQUANT_KERNEL": "1", "VT_DEQUANT_GEMV": "1"},
}


def _words(g: torch.Generator, rows: int, cols: int) -> torch.Tensor:
    """Random packed int32 words: every nibble pattern is a valid int4 code."""
    return torch.randint(-(1 << 31), (1 << 31) - 1, (rows, cols), generator=g, dtype=torch.int64).to(torch.int32)


def _x_and_scales(g: torch.Generator, s: Shape, dtype: torch.dtype, rows: int) -> tuple:
    return (
        torch.randn(1, s["k"], generator=g).to(dtype),
        (0.001 + 0.02 * torch.rand(rows, s["n"], generator=g)).to(dtype),
    )


def _awq_make(s: Shape, device: torch.device, dtype: torch.dtype, seed: int) -> tuple:
    g = torch.Generator(device="cpu").manual_seed(seed)
    x, scales = _x_and_scales(g, s, dtype, s["k"] // s["group"])
    qweight, qzeros = _words(g, s["k"], s["n"] // 8), _words(g, s["k"] // s["group"], s["n"] // 8)
    return tuple(t.to(device) for t in (x, qweight, qzeros, scales)) + (s["group"],)


def _awq_run(snapshot, x, qweight, qzeros, scales, group):
    return kernels.awq_linear(snapshot, x, qweight, qzeros, scales, group)


def _gptq_make(s: Shape, device: torch.device, dtype: torch.dtype, seed: int) -> tuple:
    g = torch.Generator(device="cpu").manual_seed(seed)
    x, scales = _x_and_scales(g, s, dtype, s["k"] // s["group"])
    qweight, qzeros = _words(g, s["k"] // 8, s["n"]), _words(g, s["k"] // s["group"], s["n"] // 8)
    g_idx = (torch.arange(s["k"]) // s["group"]).to(torch.int32)
    return tuple(t.to(device) for t in (x, qweight, qzeros, scales, g_idx))


def _gptq_run(snapshot, x, qweight, qzeros, scales, g_idx):
    return kernels.gptq_linear(snapshot, x, qweight, qzeros, scales, g_idx)


def _nvfp4_make(s: Shape, device: torch.device, dtype: torch.dtype, seed: int) -> tuple:
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(1, s["k"], generator=g).to(dtype)
    packed = torch.randint(0, 256, (s["n"], s["k"] // 2), generator=g, dtype=torch.int32).to(torch.uint8)
    block_scales = (0.25 + torch.rand(s["n"], s["k"] // 16, generator=g)).to(torch.float8_e4m3fn)
    return tuple(t.to(device) for t in (x, packed, block_scales)) + (0.01,)


def _nvfp4_run(snapshot, x, packed, block_scales, global_scale):
    return kernels.nvfp4_linear(snapshot, x, packed, block_scales, global_scale)


def _dense_peer(n_of: Callable[[tuple], int]) -> Callable:
    """prepare() of the `F.linear` peer: a dense [N, K] weight in x's dtype, N read from the packed inputs."""

    def prepare(*inputs):
        x = inputs[0]
        return x, torch.randn(n_of(inputs), x.shape[-1], dtype=x.dtype, device=x.device) * x.shape[-1] ** -0.5

    return prepare


def _int4_bytes(s: Shape, dt: torch.dtype) -> int:
    groups = s["k"] // s["group"]
    return s["k"] * s["n"] // 2 + groups * s["n"] // 2 + groups * s["n"] * _elt(dt) + (s["k"] + s["n"]) * _elt(dt)


def _quant(name: str, make: Callable, run: Callable, bytes_moved: Callable, n_of: Callable[[tuple], int]) -> Workload:
    return Workload(
        name=name,
        flags=("VT_DEQUANT_GEMV", "VT_DEQUANT_KERNEL"),
        defaults=dict(QUANT_DEFAULTS),
        make=make,
        run=run,
        bytes_moved=bytes_moved,
        arms=QUANT_ARMS,
        peers={"F.linear-dense": (_dense_peer(n_of), F.linear)},
    )


AWQ = _quant("awq-gemv", _awq_make, _awq_run, _int4_bytes, lambda a: a[1].shape[1] * 8)  # qweight [K, N/8]
GPTQ = _quant(
    "gptq-gemv",
    _gptq_make,
    _gptq_run,
    lambda s, dt: _int4_bytes(s, dt) + s["k"] * 4,  # plus g_idx
    lambda a: a[1].shape[1],
)  # qweight [K/8, N]
NVFP4 = _quant(
    "nvfp4-gemv",
    _nvfp4_make,
    _nvfp4_run,
    lambda s, dt: s["n"] * s["k"] // 2 + s["n"] * s["k"] // 16 + (s["k"] + s["n"]) * _elt(dt),
    lambda a: a[1].shape[0],
)  # packed [N, K/2]

# --- the decode step on a quantized model: the dequant arms where a checkpoint reaches them --------------

QUANT_STEPS = tuple(
    Workload(
        name=f"decode-step-{m}",
        flags=("VT_DEQUANT_GEMV", "VT_DEQUANT_KERNEL"),
        defaults=dict(step_workload.STEP_DEFAULTS),
        make=step_workload.quant_make(m),
        run=step_workload.run,
        bytes_moved=step_workload.quant_bytes(m),
        arms=QUANT_ARMS,
    )
    for m in step_workload.QUANT_METHODS
)

# --- the decode step of a Qwen3-Next (Qwen3-Next-80B's layer shapes): the GDN decode kernel in the captured step ----

NEXT_STEP = Workload(
    name="decode-step-qwen3next",
    flags=("VT_GDN_KERNEL",),
    defaults=dict(step_workload.NEXT_DEFAULTS),
    make=partial(step_workload.make, method="qwen3next"),
    run=step_workload.run,
    bytes_moved=step_workload.next_bytes,
    arms={"reference": {"VT_GDN_KERNEL": "0"}, "gdn-kernel": {"VT_GDN_KERNEL": "1"}},
    reset=step_workload.reset,
)

# --- gated delta net (Qwen3-Next's linear attention): the decode step and the chunked prefill -------------
# defaults: Qwen3-Next-80B's 16 key and 32 value heads of 128 dims; the fp32 state dominates the bytes

GDN_DEFAULTS = {"batch": 32, "seq": 1, "kh": 16, "h": 32, "dk": 128, "dv": 128, "chunk": 64}


def _gdn_make(s: Shape, device: torch.device, dtype: torch.dtype, seed: int) -> tuple:
    g = torch.Generator(device="cpu").manual_seed(seed)
    b, t, kh, h, dk, dv = s["batch"], s["seq"], s["kh"], s["h"], s["dk"], s["dv"]
    lead = (b,) if t == 1 else (b, t)  # one token: the decode step's shapes
    q = torch.randn(*lead, kh, dk, generator=g).to(dtype)
    k = torch.randn(*lead, kh, dk, generator=g).to(dtype)
    v = torch.randn(*lead, h, dv, generator=g).to(dtype)
    decay = -0.5 * torch.rand(*lead, h, generator=g)
    beta = torch.rand(*lead, h, generator=g).to(dtype)
    state = torch.randn(b, h, dk, dv, generator=g)
    return tuple(x.to(device) for x in (q, k, v, decay, beta, state)) + (s["chunk"], dk**-0.5)


def _gdn_decode_run(snapshot, q, k, v, decay, beta, state, chunk, scale):
    return kernels.gated_delta_decode(snapshot, q, k, v, decay, beta, state, scale=scale, use_qk_l2norm=True)[0]


def _gdn_bytes(s: Shape, dt: torch.dtype) -> int:
    b, t = s["batch"], s["seq"]
    state = 2 * b * s["h"] * s["dk"] * s["dv"] * 4  # read and written, fp32
    tokens = b * t * ((2 * s["kh"] * s["dk"] + 2 * s["h"] * s["dv"]) * _elt(dt) + 2 * s["h"] * 4)  # q k v out, g beta
    return state + tokens


GDN_DECODE = Workload(
    name="gdn-decode",
    flags=("VT_GDN_KERNEL",),
    defaults=dict(GDN_DEFAULTS),
    make=_gdn_make,
    run=_gdn_decode_run,
    bytes_moved=_gdn_bytes,
    arms={"reference": {"VT_GDN_KERNEL": "0"}, "gdn-kernel": {"VT_GDN_KERNEL": "1"}},
)

WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        ATTN,
        GEMV,
        GEMM,
        NORM_GEMV,
        GLU_GEMV,
        NORM_GLU_GEMV,
        QKV_ROPE_STORE,
        NORM,
        STEP,
        AWQ,
        GPTQ,
        NVFP4,
        *QUANT_STEPS,
        GDN_DECODE,
        NEXT_STEP,  # after the kernel's own workload: `--flag VT_GDN_KERNEL` alone still measures the kernel
    )
}


def for_arm(op: str, arm: str) -> Workload:
    """The workload that runs the table's `arm` of `op` by name."""
    for w in WORKLOADS.values():
        if (op, arm) in w.by_name.values():
            return w
    raise ValueError(f"no workload runs {op}/{arm} by name; pass --workload (known: {', '.join(WORKLOADS)})")


def for_flag(flag: str) -> Workload:
    for w in WORKLOADS.values():
        if flag in w.flags:
            return w
    raise ValueError(f"no workload measures {flag}; pass --workload (known: {', '.join(WORKLOADS)})")
