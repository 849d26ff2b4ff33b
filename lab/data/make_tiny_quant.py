"""Tiny quantized Qwen3 checkpoints (AWQ, GPTQ, NVFP4) and their dequantized twins, for the token gates.

Run: `python -m lab.data.make_tiny_quant --method awq --out DIR` (needs transformers). It builds the
tiny random Qwen3 of `make_tiny`, quantizes every decoder projection with the quantizers below, and writes

    DIR/quant/  config.json with its quantization_config, model.safetensors in the method's layout
    DIR/dense/  the same model with each projection's dequantized weight, for transformers (the oracle)

The dequantized weights come from the quantizers' own grid values, not from the engine's dequant ops, so
a token gate of the engine on quant/ against transformers on dense/ checks the engine's unpacking.
Methods: awq (AutoAWQ GEMM), gptq (v1, sequential groups), gptq-act-order (v1, shuffled g_idx),
gptq-v2 (v2 zeros, asymmetric), gptq-8bit (one group over K), nvfp4 (ModelOpt) and nvfp4-ct (compressed-tensors).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
GROUP = 16  # divides every tiny in_features (hidden 48/64, heads x head_dim, intermediate 96/160)
# AutoAWQ's packer writes column order_map[i] of each 8 into nibble i
AWQ_PACK_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
E2M1_MIDPOINTS = (E2M1[1:] + E2M1[:-1]) / 2
E4M3_MAX, E2M1_MAX = 448.0, 6.0

Quantized = tuple[dict[str, torch.Tensor], torch.Tensor]  # (checkpoint tensors by suffix, dequantized [N, K])


def quantize_awq(w: torch.Tensor, group: int = GROUP) -> Quantized:  # w: [N, K] fp32 (an nn.Linear weight)
    """Asymmetric 4-bit per (group of K rows, column), fp16 scales, in the AutoAWQ GEMM layout."""
    wt = w.T.float()  # [K, N]: AWQ stores x @ W
    k, n = wt.shape
    g = wt.reshape(k // group, group, n)
    lo, hi = g.amin(1).clamp(max=0), g.amax(1).clamp(min=0)
    scales = ((hi - lo) / 15).clamp(min=1e-4).half()  # [K/group, N]
    s = scales.float()[:, None, :]
    zeros = torch.round(-lo / scales.float()).clamp(0, 15)  # [K/group, N]
    q = (torch.round(g / s) + zeros[:, None, :]).clamp(0, 15)
    deq = ((q - zeros[:, None, :]) * s).reshape(k, n)
    return ({"qweight": _pack_awq(q.reshape(k, n)), "qzeros": _pack_awq(zeros), "scales": scales}, deq.T.contiguous())


def quantize_gptq(
    w: torch.Tensor,
    bits: int = 4,
    group: int = GROUP,
    act_order: bool = False,
    version: int = 1,
    sym: bool = True,
    seed: int = 0,
) -> Quantized:  # w: [N, K] fp32
    """Per (group, column) min-max GPTQ grid; with act_order the groups follow a random row order, as GPTQ's
    descending-Hessian order gives them. Rows stay in their own order in qweight; g_idx names their group."""
    wt = w.T.float()  # [K, N]
    k, n = wt.shape
    maxq = (1 << bits) - 1
    order = torch.randperm(k, generator=torch.Generator().manual_seed(seed)) if act_order else torch.arange(k)
    g_idx = torch.empty(k, dtype=torch.int32)
    g_idx[order] = (torch.arange(k) // group).to(torch.int32)
    groups = -(-k // group)
    scales = torch.empty(groups, n)
    zeros = torch.empty(groups, n)
    for gi in range(groups):
        rows = wt[g_idx == gi]
        lo, hi = rows.amin(0).clamp(max=0), rows.amax(0).clamp(min=0)
        if sym:
            hi = torch.maximum(-lo, hi)
            lo = -hi
        scale = ((hi - lo) / maxq).clamp(min=1e-4)
        zero = torch.full_like(scale, (maxq + 1) // 2) if sym else torch.round(-lo / scale)
        # version 1 stores zero - 1 in the field, so it cannot hold a zero point of 0
        scales[gi], zeros[gi] = scale, zero.clamp(1 if version == 1 else 0, maxq)
    scales16 = scales.half()
    s, z = scales16.float()[g_idx.long()], zeros[g_idx.long()]  # [K, N]
    q = (torch.round(wt / s) + z).clamp(0, maxq)
    deq = (q - z) * s
    stored_zeros = zeros - (1 if version == 1 else 0)
    tensors = {
        "qweight": _pack_sequential(q.T, bits).T.contiguous(),  # packed along K
        "qzeros": _pack_sequential(stored_zeros, bits),
        "scales": scales16,
        "g_idx": g_idx,
    }
    return tensors, deq.T.contiguous()


def quantize_nvfp4(w: torch.Tensor, layout: str = "modelopt") -> Quantized:  # w: [N, K] fp32
    """e2m1 values, an e4m3 scale per 16 of a row, one fp32 global scale: ModelOpt's `weight_scale_2`
    multiplies, compressed-tensors' `weight_global_scale` divides."""
    n, k = w.shape
    amax = w.abs().amax().clamp(min=1e-8)
    per_block = w.float().reshape(n, k // 16, 16)
    if layout == "modelopt":
        g_mul = (amax / (E2M1_MAX * E4M3_MAX)).float()
        block = (per_block.abs().amax(-1) / E2M1_MAX / g_mul).clamp(max=E4M3_MAX).to(torch.float8_e4m3fn)
        unit = block.float() * g_mul  # [N, K/16]: one e2m1 step of 1.0
    else:
        g_div = (E2M1_MAX * E4M3_MAX / amax).float()
        block = (per_block.abs().amax(-1) / E2M1_MAX * g_div).clamp(max=E4M3_MAX).to(torch.float8_e4m3fn)
        unit = block.float() / g_div
    scaled = torch.where(unit[..., None] > 0, per_block / unit[..., None].clamp(min=1e-30), 0.0)
    mag = torch.bucketize(scaled.abs(), E2M1_MIDPOINTS)  # the nearest e2m1 magnitude (a tie rounds down)
    neg = (scaled < 0) & (mag > 0)
    values = torch.where(neg, -E2M1[mag], E2M1[mag])
    if layout == "modelopt":
        deq = (values * block.float()[..., None]) * g_mul
    else:
        deq = (values * block.float()[..., None]) / g_div
    codes = (mag | (neg.long() << 3)).reshape(n, k)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8)  # element 2i in the low nibble
    if layout == "modelopt":
        tensors = {
            "weight": packed,
            "weight_scale": block,
            "weight_scale_2": g_mul.reshape(()),
            "input_scale": torch.tensor(1.0),
        }
    else:
        tensors = {
            "weight_packed": packed,
            "weight_scale": block,
            "weight_global_scale": g_div.reshape(1),
            "input_global_scale": torch.tensor([1.0]),
        }
    return tensors, deq.reshape(n, k)


def _pack_awq(q: torch.Tensor) -> torch.Tensor:  # q: [rows, N] ints in 0..15 -> [rows, N/8] int32
    cols = q.long().reshape(q.shape[0], -1, 8)[..., list(AWQ_PACK_ORDER)]
    return _to_int32((cols << (4 * torch.arange(8))).sum(-1))


def _pack_sequential(q: torch.Tensor, bits: int) -> torch.Tensor:  # q: [rows, M] -> [rows, M*bits/32] int32
    per = 32 // bits
    fields = q.long().reshape(q.shape[0], -1, per) & ((1 << bits) - 1)
    return _to_int32((fields << (bits * torch.arange(per))).sum(-1))


def _to_int32(words: torch.Tensor) -> torch.Tensor:  # unsigned 32-bit values in int64 -> their int32 bits
    return torch.where(words >= 1 << 31, words - (1 << 32), words).to(torch.int32)


def method_spec(method: str, group: int = GROUP) -> tuple[Callable[[torch.Tensor], Quantized], dict, str]:
    """(quantizer, quantization_config, the checkpoint's torch_dtype) of `method` at `group` rows per scale."""
    gptq = {
        "quant_method": "gptq",
        "bits": 4,
        "group_size": group,
        "desc_act": False,
        "sym": True,
        "checkpoint_format": "gptq",
    }
    nvfp4_ct = {
        "quant_method": "compressed-tensors",
        "format": "nvfp4-pack-quantized",
        "ignore": ["lm_head"],
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {
                    "num_bits": 4,
                    "type": "float",
                    "strategy": "tensor_group",
                    "group_size": 16,
                    "symmetric": True,
                },
            }
        },
    }
    specs: dict[str, tuple[Callable[[torch.Tensor], Quantized], dict, str]] = {
        "awq": (
            lambda w: quantize_awq(w, group),
            {"quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True, "version": "gemm"},
            "float16",
        ),
        "gptq": (lambda w: quantize_gptq(w, group=group), gptq, "float16"),
        "gptq-act-order": (
            lambda w: quantize_gptq(w, group=group, act_order=True, seed=w.shape[0] * 31 + w.shape[1]),
            {**gptq, "desc_act": True},
            "float16",
        ),
        "gptq-v2": (
            lambda w: quantize_gptq(w, group=group, version=2, sym=False),
            {**gptq, "sym": False, "checkpoint_format": "gptq_v2"},
            "float16",
        ),
        "gptq-8bit": (
            lambda w: quantize_gptq(w, bits=8, group=w.shape[1]),  # one group over K
            {**gptq, "bits": 8, "group_size": -1},
            "float16",
        ),
        "nvfp4": (
            quantize_nvfp4,
            {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]},
            "bfloat16",
        ),
        "nvfp4-ct": (lambda w: quantize_nvfp4(w, "compressed-tensors"), nvfp4_ct, "bfloat16"),
    }
    if method not in specs:
        raise ValueError(f"method {method!r}: expected one of {', '.join(specs)}")
    return specs[method]


METHODS = ("awq", "gptq", "gptq-act-order", "gptq-v2", "gptq-8bit", "nvfp4", "nvfp4-ct")


def write_pair(
    model: PreTrainedModel, method: str, out: Path, group: int = GROUP, dense: bool = True
) -> tuple[Path, Path]:
    """Quantize `model`'s decoder projections by `method`; write out/quant and (unless not `dense`) out/dense;
    return both paths."""
    from safetensors.torch import save_file  # why: only writing a checkpoint needs it

    quantize, qconfig, dtype = method_spec(method, group)
    quant_dir, dense_dir = out / "quant", out / "dense"
    tensors: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            prefix, _, leaf = name.rpartition(".")
            if leaf == "weight" and prefix.rsplit(".", 1)[-1] in PROJECTIONS and ".layers." in prefix:
                packed, deq = quantize(p.detach().float())
                p.copy_(deq)  # the oracle runs the dequantized weight
                tensors.update({f"{prefix}.{k}": v.contiguous() for k, v in packed.items()})
            elif not (name == "lm_head.weight" and model.config.tie_word_embeddings):
                tensors[name] = p.detach().clone().contiguous()
    if dense:
        model.save_pretrained(dense_dir)
    model.config.architectures = [type(model).__name__]  # as save_pretrained writes it
    model.config.save_pretrained(quant_dir)
    if model.generation_config is not None:
        model.generation_config.save_pretrained(quant_dir)
    save_file(tensors, str(quant_dir / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((quant_dir / "config.json").read_text())
    config.pop("torch_dtype", None)
    config.update(quantization_config=qconfig, dtype=dtype)
    (quant_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return quant_dir, dense_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.data.make_tiny_quant", description=__doc__.splitlines()[0])
    parser.add_argument("--method", choices=METHODS, required=True)
    parser.add_argument("--out", type=Path, required=True, help="writes OUT/quant and OUT/dense")
    parser.add_argument("--seed", type=int, default=None, help="model seed (default: make_tiny's)")
    args = parser.parse_args(argv)
    from lab.data.make_tiny import (  # why: it imports transformers (seconds); only main needs it
        SEED,
        build,
    )

    quant_dir, dense_dir = write_pair(build(SEED if args.seed is None else args.seed), args.method, args.out)
    size = sum(f.stat().st_size for f in quant_dir.iterdir())
    print(f"wrote {quant_dir} ({size / 1e6:.2f} MB, {args.method}) and its dequantized twin {dense_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
