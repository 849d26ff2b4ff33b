"""Build the embedded tiny random Qwen3 (deterministic) whose greedy choices are usually clear-cut.

Run: `python -m engine.data.make_tiny [--out DIR]` (needs transformers). Random
weights at the usual init (std 0.02) give a nearly flat next-token distribution,
where a token gate has no teeth; here every matrix is scaled to keep activations
O(1), the norms sharpen attention and the logits, and the script prints the
median top-1/top-2 logit gap it measured on random prompts.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

OUT = Path(__file__).parent / "tiny-qwen3"
SEED = 20261129
CONFIG = dict(
    vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
    num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=1024,
    rms_norm_eps=1e-6, tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
)
LOGIT_SCALE = 16.0  # final norm weight: sets the logit spread, hence the typical top-1/top-2 gap
QK_NORM_SCALE = 2.0  # q/k norm weights: sharper attention, so positions (RoPE, KV slots) matter


def build(seed: int = SEED, **overrides: object) -> torch.nn.Module:
    """A transformers Qwen3ForCausalLM with the scaled random weights (float32)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(**{**CONFIG, **overrides})
    model = Qwen3ForCausalLM(config).eval()
    scale_weights(model, seed)
    return model


def build_moe(seed: int = SEED, **overrides: object) -> torch.nn.Module:
    """A transformers Qwen3MoeForCausalLM at the same scale (tests build it at test time, never shipped)."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    moe = dict(num_experts=6, num_experts_per_tok=2, moe_intermediate_size=48, norm_topk_prob=True)
    config = Qwen3MoeConfig(**{**CONFIG, **moe, **overrides})
    model = Qwen3MoeForCausalLM(config).eval()
    scale_weights(model, seed)
    return model


def scale_weights(model: torch.nn.Module, seed: int) -> None:
    """Overwrite every parameter with seeded random values scaled for O(1) activations and sharp logits."""
    gen = torch.Generator().manual_seed(seed)
    tied = model.config.tie_word_embeddings
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                base = LOGIT_SCALE if name == "model.norm.weight" else (
                    QK_NORM_SCALE if name.endswith(("q_norm.weight", "k_norm.weight")) else 1.0)
                # random around the base so a dropped or misplaced norm weight changes the output
                p.copy_(base * (1.0 + 0.2 * torch.randn(p.shape, generator=gen)))
                if tied and name == "model.norm.weight":
                    # the head is the std-1 embedding: scale down by sqrt(hidden), and random signs stop the
                    # residual's copy of the current token's embedding from always predicting that token again
                    signs = torch.randint(0, 2, p.shape, generator=gen) * 2 - 1
                    p.mul_(signs / math.sqrt(p.shape[0]))
            elif name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))


def median_gap(model: torch.nn.Module, vocab: int, prompts: int = 32, length: int = 24, seed: int = 1) -> float:
    """Median over every position of (top-1 minus top-2 logit) on random prompts, in nats."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (prompts, length), generator=gen)
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    top = logits.topk(2, dim=-1).values
    return (top[..., 0] - top[..., 1]).median().item()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.data.make_tiny", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"output directory (default: {OUT})")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    model = build(args.seed)
    gap = median_gap(model, model.config.vocab_size)
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out)
    size = sum(f.stat().st_size for f in args.out.iterdir())
    print(f"wrote {args.out} ({size / 1e6:.2f} MB); median top-1/top-2 logit gap {gap:.2f} nats")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
