"""Numerics cases for the persistent decode layer and step (row ENGINE-PERSISTENT; engine/cuda/persistent.cu): the
kernel table's `decode_layer` op, its `persistent` arm (VT_PERSISTENT_LAYER) against its reference (the layer's ops
in turn, every kernel off), on Qwen3-0.6B's layer with seeded weights, comparing the layer's output and residual,
then this step's K and V cache slots; and `decode_model`, its `persistent_step` arm (VT_PERSISTENT_STEP: the
embedding, three layers and the final norm in one launch) on a small seeded model, comparing the final hidden state
and every layer's slots. The kernel's own sums (the GEMV fast path at split 1, its attention's order) are not the
references', so the layer cases hold it to the dtype's tolerance and the step's three layers to three layers' worth
(`<dtype>-stack3`, lab/gates/numerics.py: correct reorderings compound from layer to layer)."""

from __future__ import annotations

from functools import partial

import torch

from engine import kernels
from engine.model.batch import ForwardBatch
from lab.gates.cases import Inputs, KernelCase
from lab.gates.numerics import STACK_LAYERS
from lab.persistent import case as C

ROW = "ENGINE-PERSISTENT"
FLAG = "VT_PERSISTENT_LAYER"
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# (name, context lengths, the model's first layer, sliding window)
SHAPES = (
    ("b1/ctx1024", (1024,), False, None),
    ("b1/ctx1024/first", (1024,), True, None),
    ("b8/mixed", (1024, 77, 300, 5, 1024, 640, 129, 2000), False, None),
    ("b8/window256", (1024, 77, 300, 5, 1024, 640, 129, 2000), False, 256),
    ("b32/ctx512", (512,) * 32, False, None),
)
SMALL = {"b8/mixed"}  # the sanitizer's case
MODEL_SHAPES = (("b1", (100,)), ("b8", (37, 5, 64, 100, 1, 17, 33, 80)))  # a small model of STACK_LAYERS layers


def make(
    seed: int, device: torch.device, *, dtype: torch.dtype, lens: tuple[int, ...], first: bool, window: int | None
) -> Inputs:
    case = C.make(C.QWEN3_0_6B, list(lens), seed=seed, window=window, device=device, dtype=dtype)
    s = case.step
    assert s.x is not None and s.residual is not None  # a layer case's step carries its input rows
    return {
        "layer": case.layer,
        "x": s.x.to(device, dtype),
        "residual": None if first else s.residual.to(device, dtype),
        "cos_sin": (s.cos.to(device, dtype).contiguous(), s.sin.to(device, dtype).contiguous()),
        "caches": (s.k_cache.to(device, dtype), s.v_cache.to(device, dtype)),
        "slots": s.slot_mapping.to(device),
        "block_tables": s.block_tables.to(device),
        "context_lens": s.context_lens.to(device),
    }


def _call(x: Inputs, arm: str) -> torch.Tensor:
    """`decode_layer`'s `arm` (or its reference) on fresh copies of the caches: [rows, 2 hidden + 2 kv_dim], the
    layer's output, its residual, then this step's K and V slots."""
    k, v = (c.clone() for c in x["caches"])
    batch = ForwardBatch(
        is_prefill=False,
        slot_mapping=x["slots"],
        kv_caches=[(k, v)],
        block_tables=x["block_tables"],
        context_lens=x["context_lens"],
        flags=kernels.FlagSnapshot.defaults(),
    )
    op, args = kernels.TABLE["decode_layer"], (x["x"], x["residual"], x["cos_sin"], batch, x["layer"])
    with torch.no_grad():
        mlp, res2 = op.reference(*args) if arm == "reference" else op.run_arm(arm, *args)
    slots = x["slots"]
    return torch.cat([mlp, res2, k.flatten(0, 1)[slots].flatten(1), v.flatten(0, 1)[slots].flatten(1)], dim=-1)


def make_model(seed: int, device: torch.device, *, dtype: torch.dtype, lens: tuple[int, ...]) -> Inputs:
    case = C.make_model(C.SMALL, list(lens), seed=seed, layers=STACK_LAYERS, vocab=400, device=device, dtype=dtype)
    s = case.fresh_step(True)
    assert case.lm is not None and s.ids is not None  # a model case: its causal LM and the step's tokens
    return {
        "model": case.lm.model,
        "ids": s.ids.to(device),
        "positions": (s.context_lens - 1).long().to(device),
        "caches": [(k.to(device, dtype), v.to(device, dtype)) for k, v in s.caches()],
        "slots": s.slot_mapping.to(device),
        "block_tables": s.block_tables.to(device),
        "context_lens": s.context_lens.to(device),
    }


def _call_model(x: Inputs, arm: str) -> torch.Tensor:
    """`decode_model`'s `arm` (or its reference) on fresh copies of the caches: [rows, hidden + layers x 2 kv_dim],
    the final hidden state, then every layer's K and V slots."""
    kv = [(k.clone(), v.clone()) for k, v in x["caches"]]
    batch = ForwardBatch(
        is_prefill=False,
        slot_mapping=x["slots"],
        kv_caches=kv,
        block_tables=x["block_tables"],
        context_lens=x["context_lens"],
        flags=kernels.FlagSnapshot.defaults(),
    )
    op, args = kernels.TABLE["decode_model"], (x["ids"], x["positions"], batch, x["model"])
    with torch.no_grad():
        final = op.reference(*args) if arm == "reference" else op.run_arm(arm, *args)
    slots = x["slots"]
    return torch.cat([final, *[c.flatten(0, 1)[slots].flatten(1) for pair in kv for c in pair]], dim=-1)


def build_cases() -> list[KernelCase]:
    cases = []
    for dt, dtype in DTYPES.items():
        for name, lens, first, window in SHAPES:
            tags = ("small",) if name in SMALL else ()
            build = partial(make, dtype=dtype, lens=lens, first=first, window=window)
            cases.append(
                KernelCase(
                    f"persistent/layer/{dt}/{name}",
                    "persistent",
                    FLAG,
                    dtype,
                    build,
                    partial(_call, arm="persistent"),
                    partial(_call, arm="reference"),
                    dt,
                    ROW,
                    tags,
                )
            )
        for name, lens in MODEL_SHAPES:
            build = partial(make_model, dtype=dtype, lens=lens)
            run, ref = partial(_call_model, arm="persistent_step"), partial(_call_model, arm="reference")
            flag = "VT_PERSISTENT_STEP"
            cases.append(KernelCase(f"persistent/model/{dt}/{name}", "persistent_step", flag, dtype, build, run, ref,
                                    f"{dt}-stack{STACK_LAYERS}", ROW))  # fmt: skip
    return cases


CASES = build_cases()
