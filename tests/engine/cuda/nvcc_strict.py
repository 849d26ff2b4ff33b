"""A compile-only check of one CUDA source: host and device code with every warning an error, PTX for sm_90."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from engine.cuda import build

# Host pass plus PTX generation (no ptxas/SASS: the full build test compiles SASS for every source).
FLAGS = (
    "-std=c++17",
    "-O3",
    "-Werror",
    "all-warnings",
    "-Xcompiler",
    "-Wall,-Werror",
    "-gencode",
    "arch=compute_90,code=compute_90",
    "-c",
)

needs_nvcc = pytest.mark.skipif(
    shutil.which(build.NVCC) is None, reason=f"nvcc not found ({build.NVCC}): the CUDA sources cannot be compiled here"
)


def compile_strict(name: str, out_dir: Path) -> Path:
    """Compile engine/cuda/<name> to an object in out_dir; fail with nvcc's message on any warning."""
    out = out_dir / (Path(name).stem + ".o")
    proc = subprocess.run(
        [build.NVCC, *FLAGS, str(build.CUDA_DIR / name), "-o", str(out)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"nvcc {name}:\n{proc.stderr or proc.stdout}"
    return out
