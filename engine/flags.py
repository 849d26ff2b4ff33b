"""The one registry of VT_* environment flags, and the frozen snapshot of them the engine runs with.

`docs/ENVIRONMENT.md` is rendered from `FLAGS`, and the env-doc check reads the
`declare(...)` calls below as the engine's env reads, so a flag exists exactly
when it is declared here.

The environment is the user's switchboard; it is read once, into a `FlagSnapshot`
(`FlagSnapshot.from_env()`, when a Runner, a gate or a benchmark starts). Kernel
choice reads only snapshots (engine/kernels/). Tests and benchmarks build
their own (`FlagSnapshot.defaults().with_(VT_GEMV=False)`, `REFERENCE`) and never
write the environment. `enabled`/`value` read one flag now, for start-up settings
(the build's arch list and cache), never for kernel choice.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

_TRUE = frozenset({"1", "true", "on", "yes"})
_FALSE = frozenset({"0", "false", "off", "no", ""})


@dataclass(frozen=True)
class Flag:
    name: str
    default: bool | str
    gates: str  # the row or component whose behaviour the flag selects
    doc: str  # one line, rendered into docs/ENVIRONMENT.md

    @property
    def is_bool(self) -> bool:
        return isinstance(self.default, bool)


FLAGS: dict[str, Flag] = {}


def declare(name: str, default: bool | str, gates: str, doc: str) -> Flag:
    if not name.startswith("VT_"):
        raise ValueError(f"flag {name!r} must start with VT_")
    if name in FLAGS:
        raise ValueError(f"flag {name} declared twice")
    FLAGS[name] = flag = Flag(name, default, gates, doc)
    return flag


def parse(name: str, raw: str | None) -> bool | str:
    """A declared flag's value from its environment text (None: unset, the default); a bad boolean names the flag."""
    flag = FLAGS[name]
    if raw is None:
        return flag.default
    if not flag.is_bool:
        return raw
    low = raw.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError(f"{name}={raw!r}: expected one of 1/0, true/false, on/off, yes/no")


def enabled(name: str) -> bool:
    """A boolean flag read from the environment now (start-up settings only; kernel choice reads a snapshot)."""
    if not FLAGS[name].is_bool:
        raise TypeError(f"{name} is a string flag; use flags.value()")
    return bool(parse(name, os.environ.get(name)))


def value(name: str) -> str:
    """A string flag read from the environment now (start-up settings only)."""
    if FLAGS[name].is_bool:
        raise TypeError(f"{name} is a boolean flag; use flags.enabled()")
    return str(parse(name, os.environ.get(name)))


@dataclass(frozen=True)
class FlagSnapshot:
    """Every declared flag's value, fixed: what one Runner, gate or benchmark runs with from start to end.

    Build one with `from_env()` (the user's environment, read once), `defaults()` or `REFERENCE` (every
    compiled kernel off), and derive others with `with_(VT_X=True, ...)`; equal settings compare and hash
    equal. An unknown or mistyped name is an error naming it.

    `named` holds the kernel-table arms a gate or benchmark names (op -> arm, `engine.kernels.naming`): the table
    tries each before that op's precedence chain. It is never read from the environment: an arm kept out of the
    default order (the retire rule, docs/BENCHMARKS.md) has no flag, and a user's run names none.
    """

    values: Mapping[str, bool | str] = field(default_factory=dict)
    named: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        full: dict[str, bool | str] = {name: flag.default for name, flag in FLAGS.items()}
        for name, val in self.values.items():
            flag = FLAGS.get(name)
            if flag is None:
                raise KeyError(f"{name}: not a flag declared in engine/flags.py")
            if flag.is_bool != isinstance(val, bool):
                kind = "boolean" if flag.is_bool else "string"
                raise TypeError(f"{name}: a {kind} flag, got {val!r}")
            full[name] = val
        object.__setattr__(self, "values", MappingProxyType(full))
        object.__setattr__(self, "named", MappingProxyType(dict(self.named)))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> FlagSnapshot:
        """The declared flags as `environ` (default: this process's environment) sets them; unset: default."""
        env = os.environ if environ is None else environ
        return cls({name: parse(name, env.get(name)) for name in FLAGS})

    @classmethod
    def defaults(cls) -> FlagSnapshot:
        return cls()

    def with_(self, **changes: bool | str) -> FlagSnapshot:
        """A copy with `changes` applied (`snap.with_(VT_ATTN_TILED=False)`); the named arms kept."""
        return FlagSnapshot({**self.values, **changes}, self.named)

    def with_arm(self, op: str, arm: str) -> FlagSnapshot:
        """A copy that names `arm` for the kernel table's `op` (checked by the table: `engine.kernels.naming`)."""
        return FlagSnapshot(self.values, {**self.named, op: arm})

    def enabled(self, name: str) -> bool:
        if not FLAGS[name].is_bool:
            raise TypeError(f"{name} is a string flag; use value()")
        return bool(self.values[name])

    def value(self, name: str) -> str:
        if FLAGS[name].is_bool:
            raise TypeError(f"{name} is a boolean flag; use enabled()")
        return str(self.values[name])

    @property
    def kernels(self) -> bool:
        """VT_KERNELS, the master switch: off, every op runs its torch reference."""
        return self.enabled("VT_KERNELS")

    def changed(self) -> dict[str, bool | str]:
        """The flags whose value differs from the default (what to print beside a result)."""
        return {n: v for n, v in self.values.items() if v != FLAGS[n].default}

    def __hash__(self) -> int:
        return hash((tuple(sorted(self.values.items())), tuple(sorted(self.named.items()))))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, FlagSnapshot)
            and dict(self.values) == dict(other.values)
            and dict(self.named) == dict(other.named)
        )

    def __repr__(self) -> str:
        changed = [f"{n}={v!r}" for n, v in sorted(self.changed().items())]
        changed += [f"{op}/{arm} by name" for op, arm in sorted(self.named.items())]
        return f"FlagSnapshot({', '.join(changed) or 'defaults'})"


# --- build (BACKEND-CUDA) ---------------------------------------------------
declare(
    "VT_CUDA_ARCHS",
    "",
    "BACKEND-CUDA",
    "Comma-separated archs to compile (e.g. `9.0,9.0a`); empty: the feature table's union for a fat build, the local GPU's arch for a JIT build.",
)
declare(
    "VT_CUDA_CACHE",
    "",
    "BACKEND-CUDA",
    "Directory of the content-hashed kernel build cache; empty: `~/.cache/rowgate/cuda`.",
)
declare(
    "VT_KERNELS",
    True,
    "BACKEND-CUDA",
    "Use the compiled default-ON CUDA kernels when tensors are on a GPU; `0` runs the torch references everywhere.",
)

# --- paged attention (KERNEL-ATTN-PAGED) ------------------------------------
declare(
    "VT_ATTN_TILED",
    True,
    "KERNEL-ATTN-PAGED",
    "Tiled paged decode attention on tensor cores (bf16/fp16, head_dim 64/128/256, up to 8 query heads per KV head): a scores pass and a P.V pass over cp.async-pipelined K/V tiles, probabilities rounded as the reference rounds them, split-KV sized from the block tables' capacity; takes precedence over the other arms. ON after the flip protocol (A/B 12.3x); `0` is the rollback.",
)
declare(
    "VT_ATTN_TILED_FUSED",
    False,
    "ENGINE-PERF",
    "With VT_ATTN_TILED: the tiled attention's two passes and split sum in one launch where it fits (each split's scores in shared memory; splits wait for each other's statistics, so only when the grid is resident at once); the same arithmetic, so bitwise the two-pass output.",
)
declare(
    "VT_ATTN_PV_PIPELINED",
    True,
    "ENGINE-PERF",
    "With VT_ATTN_TILED: the tiled attention's P.V pass computes each probability once with all of the block's threads (a tile ahead, into a shared tile the MMAs read), requests its first V tiles before it reads the split statistics, and its last split adds the partial sums (no split-sum launch); the same arithmetic in the same order, so bitwise the plain two passes' output. ON after the flip protocol (A/B 1.028-1.091x at the six peer shapes); `0` is the rollback.",
)
declare(
    "VT_ATTN_PDL",
    True,
    "ENGINE-PERF",
    "With VT_ATTN_PV_PIPELINED: the P.V pass launched as a programmatic dependent of the scores pass (sm_90): its blocks start once every scores block has, issue their first V tiles (which neither pass writes) and wait for the scores before reading them, so the launch gap and the V loads' latency overlap the scores pass. The same arithmetic, so the same bits. Only grids of at most 2 blocks per SM (both passes resident; taken everywhere it lost 0.935x on the batch-32 step). Whole decode step at batch 1 1.051x; ON after the flip protocol; `0` is the rollback.",
)
declare(
    "VT_ATTN_ONEPASS",
    True,
    "ENGINE-PERF",
    "With VT_ATTN_TILED: one-pass tiled decode attention (bf16/fp16, head_dim 64/128, and 256 where two blocks of its K and V stages fit per SM, as on sm_90; up to 8 query heads per KV head): K and V of each tile in one cp.async pipeline, an online softmax in fp32 with the probabilities rounded only as the P.V operand (as production decode kernels round), the split combine in the last split, one launch; held to the fp32 reference and the near-tie razor's fp32-probabilities setting; takes precedence over the other tiled arms. ON after the flip protocol (the razor beside cuDNN and FlashInfer on d128, d128-g4 and long, inside their range; A/B 1.09-1.35x the two-pass arm at the six peer shapes, H100); `0` is the rollback.",
)
declare(
    "VT_ATTN_SPLIT_TABLE",
    False,
    "ENGINE-PERSISTENT",
    "The tiled and one-pass decode attention arms take their split-KV count from the measured table for this device and dtype (engine/data/attn_splits/*.json, written by `python -m lab bench splits --out`): the nearest measured (batch x KV heads, table capacity, head_dim) on a log scale, never past the measured grid; elsewhere, or with no table for the device, the occupancy rule. Another split count adds the splits in another order: OFF until the flip protocol.",
)
declare(
    "VT_PREFILL_ATTN",
    True,
    "ENGINE-GATE-REACH",
    "Varlen prefill/extend attention kernel for prefill and mixed steps (bf16/fp16 on tensor cores, head_dim 32/64/128/256; fp32 as one decode row per token): every sequence's new tokens in one launch, the cached prefix read through the block table, scores and probabilities rounded as the reference rounds them. ON after the flip protocol (throughput A/B 1.29x at 256 requests); `0` is the rollback.",
)

# --- runner (ENGINE-GRAPH) --------------------------------------------------
declare("VT_EAGER", False, "ENGINE-GRAPH", "Run the decode step eagerly instead of replaying its captured CUDA graph.")

# --- model (MODEL-MERGED-PROJ) -----------------------------------------------
declare(
    "VT_MERGED_PROJ",
    True,
    "MODEL-MERGED-PROJ",
    "One GEMM for q/k/v and one for gate/up per decoder layer on a GPU (the weights already sit side by side); other GEMM kernels than the separate products, so another rounding order. ON after the flip protocol (decode-step A/B 1.279x); `0` is the rollback.",
)

# --- MoE, gated delta net, quantised weights (KERNEL-MOE, KERNEL-GDN, QUANT-*) ---
declare(
    "VT_MOE_KERNELS",
    False,
    "KERNEL-MOE",
    "Compiled MoE routing, token-to-expert alignment and grouped expert GEMMs (fp32 GEMM accumulation, so not byte-exact).",
)
declare(
    "VT_GDN_KERNEL",
    True,
    "KERNEL-GDN",
    "Compiled gated delta net decode step (fp32 state; its reduction order differs from the reference). ON after the flip protocol (bf16 razor with the arm required, whole-step A/B 1.168x); `0` is the rollback.",
)
declare(
    "VT_DEQUANT_KERNEL",
    True,
    "QUANT-AWQ",
    "Compiled AWQ, GPTQ and NVFP4 dequant to the model dtype (bit-exact to the references, so ON: 4.39x on the AWQ decode step at batch 32, output equal); `0` is the rollback.",
)
declare(
    "VT_DEQUANT_GEMV",
    True,
    "QUANT-AWQ",
    "Fused dequant-GEMV for AWQ, GPTQ and NVFP4 weights at M=1 (fp32 accumulation; flipped ON: 1.40-2.80x on the decode step, its output equal).",
)

# --- norm, RoPE, activation, sampling, GEMV (KERNEL-NORM/ROPE/ACT/SAMPLE/GEMV) --
# The default-ON kernels are bitwise equal to their torch reference on the numerics gate; the others
# (another fp32 summation order, another random stream) are fast arms behind a default-OFF flag.
declare(
    "VT_NORM_KERNEL",
    True,
    "KERNEL-NORM",
    "RMSNorm and fused add+RMSNorm CUDA kernels (the reference's rounding points; the fp32 sum of squares in another order than torch's, so fp32 outputs differ by an ulp). ON after the flip protocol (A/B 1.23x); `0` is the rollback.",
)
declare(
    "VT_ROPE_KERNEL",
    True,
    "KERNEL-ROPE",
    "Neox RoPE CUDA kernel (products and sum rounded to the model dtype, as the reference).",
)
declare(
    "VT_QK_NORM_ROPE_FUSED",
    True,
    "KERNEL-ROPE",
    "Fused Qwen3 q/k RMSNorm + neox RoPE kernel (one launch per q or k; its sum-of-squares order differs from torch's). ON after the flip protocol (decode-step A/B 1.034x); `0` is the rollback.",
)
declare(
    "VT_ACT_KERNEL", True, "KERNEL-ACT", "SiLU-and-mul CUDA kernel (silu rounded to the model dtype, then the product)."
)
declare(
    "VT_ARGMAX_KERNEL",
    True,
    "KERNEL-SAMPLE",
    "Two-pass greedy argmax CUDA kernel (torch.argmax's lowest-index tie and first-NaN rules).",
)
declare(
    "VT_SAMPLE_KERNEL",
    False,
    "KERNEL-SAMPLE",
    "Top-k/top-p sampling CUDA kernel (radix-select thresholds, counter-based Gumbel draw; not torch's RNG stream).",
)
declare(
    "VT_SAMPLE_ROWS_KERNEL",
    True,
    "ENGINE-SERVE",
    "The serving sampler's unfiltered draw as one fused CUDA pass (the reference's counter-based Gumbel noise recomputed in registers, the same fp32 operations, then the row argmax) instead of [batch, vocab] torch temporaries. Bit-exact to the reference (12/12 cases on the H200), so ON; `0` is the rollback.",
)
declare(
    "VT_ASYNC_SCHEDULE",
    True,
    "ENGINE-SERVE",
    "engine.LLM schedules and prepares the next decode step while the current one runs, reading the sampled tokens one step late (a stop token found then drops its row from the prepared step). ON after its A/B (1.053x at 256 requests, the same tokens); `0` is the rollback.",
)
declare(
    "VT_GEMV",
    True,
    "KERNEL-GEMV",
    "Decode GEMV CUDA kernel for linear with one or two rows (fp32 accumulation in its own order, output in x's dtype); the kernels take up to 8, but from 3 rows the step is faster on cuBLAS (A/B 0.553 at b8), so the table gives them 1-2. ON after the flip protocol (decode-step A/B 1.317x); `0` is the rollback.",
)


# --- the decode step's fused launches (ENGINE-PERF) ---------------------------------------------------------
declare(
    "VT_QKV_ROPE_STORE",
    True,
    "ENGINE-PERF",
    "One launch per layer for q and k RMSNorm + neox RoPE and the KV cache store of k and v (the fused q/k norm+RoPE kernel's arithmetic, so its bits). ON after the flip protocol (decode-step A/B 1.086x); `0` is the rollback.",
)
declare(
    "VT_NORM_GEMV",
    True,
    "ENGINE-PERF",
    "With VT_GEMV: the residual add + RMSNorm before q/k/v and gate/up folded into the GEMV's prologue (each block normalises the input row in shared memory); the norm and GEMV kernels' arithmetic, so their bits. ON after the flip protocol (decode-step A/B 1.042x); `0` is the rollback.",
)
declare(
    "VT_GEMV_PDL",
    True,
    "ENGINE-PERF",
    "Launch the decode GEMVs (plain and prologue) as programmatic dependents (sm_90): a GEMV's blocks start and issue their weight loads while the kernel before it drains, then wait for their input; the same arithmetic; never after a kernel that writes its W (a dequant). Wins between GEMVs (1.07-1.13x); on the whole step 1.004x over the former defaults, and the streamed GEMV needs it (VT_GEMV_STREAM). ON with it after the flip protocol; `0` is the rollback.",
)
declare(
    "VT_GLU_GEMV",
    True,
    "ENGINE-PERF",
    "With VT_GEMV and VT_MERGED_PROJ: SiLU-and-mul in the gate/up GEMV's epilogue (a warp sums a gate row and its up row, then writes the activation), so the down projection is a plain GEMV; the GEMV and activation kernels' arithmetic, so their bits. ON after the flip protocol (decode-step A/B 1.030x); `0` is the rollback.",
)

declare(
    "VT_PERSISTENT_LAYER",
    False,
    "ENGINE-PERSISTENT",
    "A decode step's dense Qwen3 layer as one persistent launch (engine/cuda/persistent.cu): SM-count blocks take the layer's tiles (norm, q/k/v, RoPE and KV store, scores, softmax and P.V, o_proj, norm, gate/up, down) from an on-device queue, each waiting on counters for its inputs, no grid barrier and no launch between them. Its own sums (the GEMV fast path at split 1, the generic paged kernel's attention), not the chain's bits. bf16/fp16, one GPU, no quantization or bias. OFF until its GPU tests, the step A/B and the flip protocol.",
)
declare(
    "VT_PERSISTENT_STEP",
    False,
    "ENGINE-PERSISTENT",
    "A decode step's embedding, every dense Qwen3 layer and the final norm as one persistent launch (engine/cuda/persistent.cu): the layer's tiles of VT_PERSISTENT_LAYER for every layer in turn, each layer's first norm waiting on the last one's down tiles, no launch between them; the LM head stays its own op. The same sums as VT_PERSISTENT_LAYER. bf16/fp16, one GPU, every layer dense with one sliding window, at most 64 layers. OFF until its GPU tests, the step A/B and the flip protocol.",
)
declare(
    "VT_GEMM_SMALL",
    False,
    "ENGINE-PERSISTENT",
    "The small decode GEMM for 2 to 32 rows of x, plain and with the residual add + RMSNorm prologue: W streamed once in 16-byte loads, the rows staged in shared memory, mma.sync with fp32 accumulation in its own order (not the GEMV's or cuBLAS's bits), one m16 tile up to 16 rows; bf16/fp16, no bias. When on it comes first, and the table gives it the range it won against cuBLAS: 3-8 rows of a narrow projection (at most 1024 outputs: o and down, 1.21-1.22x at 8 rows); the prologue form lost everywhere and runs only by name. OFF: the step A/Bs at b8 and b32 of every form lost to cuBLAS (docs/BENCHMARKS.md, \"The b8 step\"); the range's own A/B and flip are owed.",
)
declare(
    "VT_GEMV_STREAM",
    True,
    "ENGINE-PERF",
    "With VT_GEMV: the decode GEMVs (plain, GLU epilogue, norm prologue) with W streamed through shared memory (sm_90 bulk copies into a ring per warp, one resident block per SM), so bytes in flight cost no registers and the next GEMV's block fits beside it; the first W copies are issued before the input wait and the next grid is let in at once. The fast path's sum order, so its bits. Whole decode step over the three fused arms and VT_GEMV_PDL: 1.038-1.041x; without PDL 0.959x (a loss). ON with VT_GEMV_PDL after the flip protocol; `0` is the rollback.",
)


REFERENCE = FlagSnapshot({"VT_KERNELS": False})  # every op runs its pure-torch reference
