"""Build the embedded tiny random Qwen3 (deterministic) whose greedy choices are usually clear-cut.

Run: `python -m lab.data.make_tiny [--out DIR]` (needs transformers). It also writes a small
byte-level BPE tokenizer (trained here on CORPUS with the `tokenizers` library, so any text encodes)
and puts its `<|endoftext|>` id in generation_config.json as the model's EOS. Random
weights at the usual init (std 0.02) give a nearly flat next-token distribution,
where a token gate has no teeth; here every matrix is scaled to keep activations
O(1), the norms sharpen attention and the logits, and the script prints the
median top-1/top-2 logit gap it measured on random prompts.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from tokenizers import Tokenizer
    from transformers import PreTrainedModel

OUT = Path(__file__).resolve().parents[2] / "engine" / "data" / "tiny-qwen3"  # the model LLM() loads
SEED = 20261129
CONFIG: dict[str, Any] = dict(  # Qwen3Config keyword arguments, of mixed types
    vocab_size=512,
    hidden_size=64,
    intermediate_size=160,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=1024,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
)
EOS = "<|endoftext|>"
# the tokenizer's training text: its merges come from it, so it is fixed here, not read from files that change
CORPUS = (
    "The engine reads a prompt, runs it through the model and writes the next token. "
    "A scheduler keeps requests waiting until blocks of the key and value cache are free, "
    "then runs them beside the others, one token at a time, until each one stops. "
    "Hello, world! Tell me a story about a small model that learned to count: one, two, three, four, five. "
    "Once upon a time there was a reference engine with honest numbers and gates that could fail. "
    "def main(argv: list[str]) -> int:\n    return 0\n"
    "Questions and answers: What is a token? A piece of text. What is a block? Sixteen tokens of cache. "
)
LOGIT_SCALE = 16.0  # final norm weight: sets the logit spread, hence the typical top-1/top-2 gap
QK_NORM_SCALE = 2.0  # q/k norm weights: sharper attention, so positions (RoPE, KV slots) matter


def build(seed: int = SEED, **overrides: Any) -> PreTrainedModel:
    """A transformers Qwen3ForCausalLM with the scaled random weights (float32)."""
    from transformers import (  # why: transformers takes seconds to import
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    config = Qwen3Config(**{**CONFIG, **overrides})
    model = Qwen3ForCausalLM(config).eval()
    scale_weights(model, seed)
    return model


def build_moe(seed: int = SEED, **overrides: Any) -> PreTrainedModel:
    """A transformers Qwen3MoeForCausalLM at the same scale (tests build it at test time, never shipped)."""
    from transformers import (  # why: transformers takes seconds to import
        Qwen3MoeConfig,
        Qwen3MoeForCausalLM,
    )

    moe: dict[str, Any] = dict(num_experts=6, num_experts_per_tok=2, moe_intermediate_size=48, norm_topk_prob=True)
    config = Qwen3MoeConfig(**{**CONFIG, **moe, **overrides})
    model = Qwen3MoeForCausalLM(config).eval()
    scale_weights(model, seed)
    return model


# Qwen3-Next's own sizes beside CONFIG's: gated delta net heads, a shared expert, every second layer full attention
NEXT: dict[str, Any] = dict(
    linear_conv_kernel_dim=4,
    linear_key_head_dim=32,
    linear_value_head_dim=32,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    num_experts=6,
    num_experts_per_tok=2,
    moe_intermediate_size=48,
    shared_expert_intermediate_size=64,
    norm_topk_prob=True,
    num_hidden_layers=4,
    layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
)


def build_next(seed: int = SEED, **overrides: Any) -> PreTrainedModel:
    """A transformers Qwen3NextForCausalLM at the same scale (gated delta net and full-attention layers, MoE with a
    shared expert, partial RoPE); tests build it at test time, never shipped."""
    from transformers import (  # why: transformers takes seconds to import
        Qwen3NextConfig,
        Qwen3NextForCausalLM,
    )

    config = Qwen3NextConfig(**{**CONFIG, **NEXT, **overrides})
    model = Qwen3NextForCausalLM(config).eval()
    scale_weights(model, seed)
    return model


def scale_weights(model: PreTrainedModel, seed: int) -> None:
    """Overwrite every parameter with seeded random values scaled for O(1) activations and sharp logits."""
    gen = torch.Generator().manual_seed(seed)
    tied = model.config.tie_word_embeddings
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                base = (
                    LOGIT_SCALE
                    if name == "model.norm.weight"
                    else (QK_NORM_SCALE if name.endswith(("q_norm.weight", "k_norm.weight")) else 1.0)
                )
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


def build_tokenizer(vocab_size: int) -> Tokenizer:
    """A byte-level BPE tokenizer (`tokenizers.Tokenizer`) of at most `vocab_size` ids, EOS the last."""
    from tokenizers import (  # why: only the tokenizer needs it
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        trainers,
    )

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - 1, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator([CORPUS] * 4, trainer)
    tok.add_special_tokens([EOS])
    return tok


# ChatML, as Qwen's checkpoints write it: the server's /v1/chat/completions renders it with jinja2
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>'"
    " + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def save_tokenizer(out: Path, vocab_size: int) -> int:
    """Write tokenizer.json, tokenizer_config.json and the EOS in generation_config.json; returns the EOS id."""
    tok = build_tokenizer(vocab_size)
    tok.save(str(out / "tokenizer.json"))
    eos = tok.token_to_id(EOS)
    if eos is None:  # build_tokenizer adds it as a special token
        raise RuntimeError(f"tokenizer has no {EOS} token")
    tok_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": EOS,
        "pad_token": EOS,
        "model_max_length": CONFIG["max_position_embeddings"],
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2) + "\n")
    gen_path = out / "generation_config.json"
    gen = json.loads(gen_path.read_text()) if gen_path.is_file() else {}
    gen["eos_token_id"] = eos
    gen_path.write_text(json.dumps(gen, indent=2, sort_keys=True) + "\n")
    return eos


def median_gap(model: PreTrainedModel, vocab: int, prompts: int = 32, length: int = 24, seed: int = 1) -> float:
    """Median over every position of (top-1 minus top-2 logit) on random prompts, in nats."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (prompts, length), generator=gen)
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    top = logits.topk(2, dim=-1).values
    return (top[..., 0] - top[..., 1]).median().item()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.data.make_tiny", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"output directory (default: {OUT})")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    model = build(args.seed)
    gap = median_gap(model, model.config.vocab_size)
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out)
    eos = save_tokenizer(args.out, model.config.vocab_size)
    size = sum(f.stat().st_size for f in args.out.iterdir())
    print(
        f"wrote {args.out} ({size / 1e6:.2f} MB); median top-1/top-2 logit gap {gap:.2f} nats; "
        f"tokenizer with EOS id {eos}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
