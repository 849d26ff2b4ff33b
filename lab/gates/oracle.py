"""The Hugging Face transformers oracle: its own greedy decoding and teacher-forced log-probabilities."""

from __future__ import annotations

from pathlib import Path

import torch

ATTN_IMPLEMENTATIONS = ("eager", "sdpa")


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
