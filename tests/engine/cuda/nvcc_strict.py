"""A compile check of one CUDA source: host and device code with every warning an error, SASS and PTX for sm_90."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.cuda import build

needs_nvcc = pytest.mark.skipif(
    shutil.which(build.NVCC) is None, reason=f"nvcc not found ({build.NVCC}): the CUDA sources cannot be compiled here"
)


def compile_strict(name: str, out_dir: Path) -> Path:
    """Compile engine/cuda/<name> for sm_90 with build.py's warnings-as-errors flags (nvcc's `-Werror
    all-warnings`, the host compiler's `-Wall -Werror`) into out_dir, the shared `sm90_werror_dir` of the
    session: a source another test compiled the same way is a cache hit. Fails with nvcc's message."""
    return build.compile_source(build.CUDA_DIR / name, ("9.0",), out_dir, werror=True).obj
