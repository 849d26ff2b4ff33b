"""The Hugging Face transformers oracle: its own greedy decoding and teacher-forced log-probabilities."""

from __future__ import annotations

from pathlib import Path

import torch

ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "online")


def attend_online(
    qh: torch.Tensor,  # [Hq, Lq, D]
    k: torch.Tensor,  # [Lk, Hkv, D]
    v: torch.Tensor,  # [Lk, Hkv, D]
    allowed: torch.Tensor,  # [Lq, Lk] bool
    scale: float,
    splits: int = 1,
) -> torch.Tensor:  # [Hq, Lq, D]
    """Attention at an online-softmax kernel's rounding points (FlashInfer's and cuDNN's decode, the engine's
    fp32-probabilities arms), in the engine reference's signature (engine/ops/paged_attn.py `_attend`): fp32
    scores and statistics, each KV split's exp(s - max) rounded to the dtype only as its P.V operand, the fp32
    partials rescaled and merged, one division and one rounding at the end."""
    group = qh.shape[0] // k.shape[1]
    kh = k.transpose(0, 1).repeat_interleave(group, dim=0).float()
    vh = v.transpose(0, 1).repeat_interleave(group, dim=0).float()
    scores = (torch.einsum("hqd,hkd->hqk", qh.float(), kh) * scale).masked_fill(~allowed, float("-inf"))
    step = -(-scores.shape[-1] // splits)
    parts = []
    for start in range(0, scores.shape[-1], step):
        keys = slice(start, start + step)
        s = scores[..., keys]
        m = s.amax(-1, keepdim=True)
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)  # a split with every key masked adds nothing
        p = torch.exp(s - m)
        parts.append((m, p.sum(-1, keepdim=True), torch.einsum("hqk,hkd->hqd", p.to(qh.dtype).float(), vh[:, keys])))
    top = torch.stack([m for m, _, _ in parts]).amax(0)
    out = torch.stack([o * torch.exp(m - top) for m, _, o in parts]).sum(0)
    total = torch.stack([lsum * torch.exp(m - top) for m, lsum, _ in parts]).sum(0)
    return (out / total).to(qh.dtype)


def online_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,  # [batch, heads, q, d]
    key: torch.Tensor,  # [batch, kv_heads, k, d]
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,  # additive (0 where allowed), [batch, 1, q, k]: the eager mask
    scaling: float,
    dropout: float = 0.0,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """transformers' attention as `attend_online`, one sequence at a time and one KV split, so the oracle of the
    fp32-probs setting rounds where an online-softmax arm does on every device (SDPA's CPU kernel does not: the
    online base sits 1-7 positions in 1024 out of band from it, as many as the seeded bugs)."""
    outs = []
    for b in range(query.shape[0]):
        q_len, k_len = query.shape[2], key.shape[2]
        if attention_mask is None:
            allowed = torch.ones(q_len, k_len, dtype=torch.bool, device=query.device).tril(k_len - q_len)
        elif attention_mask.dtype == torch.bool:
            allowed = attention_mask[b, 0]
        else:
            allowed = attention_mask[b, 0] == 0
        out = attend_online(query[b], key[b].transpose(0, 1), value[b].transpose(0, 1), allowed, scaling)
        outs.append(out.transpose(0, 1))  # [q, heads, d]
    return torch.stack(outs).contiguous(), None


def _register_online() -> None:
    from transformers import AttentionInterface  # why: seconds to import
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register("online", online_attention_forward)
    AttentionMaskInterface.register("online", eager_mask)  # an additive mask, always materialized


class Oracle:
    """A transformers model loaded from the same directory the engine reads (local files only).

    Eager attention by default, because it rounds at the same points as the engine's reference
    attention; `attn_implementation="sdpa"` keeps scores and probabilities in fp32, as production
    attention kernels do (FlashInfer, cuDNN): the oracle the razor's calibration holds them to.
    """

    def __init__(
        self,
        model_dir: str | Path,
        dtype: torch.dtype = torch.float32,
        device: str = "cpu",
        attn_implementation: str = "eager",
    ) -> None:
        if attn_implementation not in ATTN_IMPLEMENTATIONS:
            raise ValueError(f"oracle attention {attn_implementation!r}: expected one of {ATTN_IMPLEMENTATIONS}")
        try:
            if attn_implementation == "online":
                _register_online()
            from transformers import (  # why: seconds to import
                AutoModelForCausalLM,
                GenerationConfig,
            )
        except ImportError as exc:  # the engine runs without it; only the gates need it
            raise RuntimeError("the oracle needs transformers: pip install 'rowgate[oracle]'") from exc
        self.device = torch.device(device)
        self.model = (
            AutoModelForCausalLM.from_pretrained(
                str(model_dir),
                dtype=dtype,
                attn_implementation=attn_implementation,
                local_files_only=True,
            )
            .to(self.device)  # type: ignore[arg-type]  # transformers mistypes .to (self unbound)
            .eval()
        )
        # plain greedy, whatever the checkpoint's generation_config says: the engine never stops at EOS
        # and applies no repetition penalty, and generate fills unset values back in from that file
        self.model.generation_config = GenerationConfig(do_sample=False, pad_token_id=0)

    @torch.inference_mode()
    def greedy(self, prompt: list[int], max_new_tokens: int) -> list[int]:
        """transformers' own `generate` (greedy, one prompt, no padding); the prompt is not returned."""
        # why: transformers takes seconds to import
        from transformers import GenerationConfig

        ids = torch.tensor([prompt], device=self.device)
        config = GenerationConfig(do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=0)
        out = self.model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config)
        return out[0, len(prompt) :].tolist()

    @torch.inference_mode()
    def teacher_forced_logprobs(self, prompt: list[int], continuation: list[int]) -> torch.Tensor:
        """[len(continuation), vocab] fp32 log-probabilities of each continuation position, fed our ids."""
        ids = torch.tensor([prompt + continuation[:-1]], device=self.device)
        logits = self.model(input_ids=ids).logits[0, len(prompt) - 1 :]
        return torch.log_softmax(logits.float(), dim=-1).cpu()
