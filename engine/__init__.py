"""rowgate's reference LLM-decode engine: torch references, CUDA kernels behind VT_* flags, gates.

`from engine import LLM, SamplingParams` is the serving API (engine.llm); it loads torch on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LLM", "RequestOutput", "SamplingParams"]


def __getattr__(name: str) -> Any:
    # lazy: `import engine.flags` (and the checkers reading the tree) must not pull in torch
    if name in ("LLM", "RequestOutput"):
        from engine import (
            llm,  # why: `import engine.flags` must not load torch (the serving stack does)
        )

        return getattr(llm, name)
    if name == "SamplingParams":
        from engine.sampling_params import (
            SamplingParams,  # why: the same lazy loading as LLM
        )

        return SamplingParams
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
