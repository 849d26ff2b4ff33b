"""Fixtures shared by the kernel-family tests; a test module names its family in FAMILY (the source
`engine/cuda/<FAMILY>.cu`) and what it tests in KERNELS (for the skip reason)."""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import pytest
import torch

from engine.cuda import build
from tests.engine.cuda.nvcc_strict import FatBuild, compile_strict, strict_last


@pytest.fixture
def cuda(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> torch.device:
    if not torch.cuda.is_available():
        pytest.skip(f"no CUDA device: {request.module.KERNELS} run only on a GPU")
    # engine.ops is the pure torch reference; the bindings are called directly
    return torch.device("cuda")


@pytest.fixture(scope="session")
def sm90_werror_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one output directory of the session's sm_90 builds with warnings as errors: build.py names an
    object by the hash of its source, headers, flags and nvcc, so a source that several tests compile
    (`compiled`, `compile_strict`, test_build's every-source build) runs nvcc once, and none where the fat
    build's object of it is taken instead (nvcc_strict)."""
    return tmp_path_factory.mktemp("cuda-sm90-werror")


@pytest.fixture(scope="module")
def compiled(request: pytest.FixtureRequest, sm90_werror_dir: Path) -> ctypes.CDLL:
    """The family's source compiled for sm_90 with warnings as errors (no GPU needed)."""
    if shutil.which("nvcc") is None and not Path(build.NVCC).exists():
        pytest.skip("nvcc not found: the CUDA sources cannot be compiled here")
    return ctypes.CDLL(str(compile_strict(f"{request.module.FAMILY}.cu", sm90_werror_dir)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """While a fat build runs beside pytest (FAT_BUILD_PID), the tests that take its objects run last, so that the
    rest of the suite runs while it compiles; the sort is stable, so every test keeps its order otherwise."""
    fat = FatBuild.from_env()
    if fat is None or fat.pid is None:
        return
    items[:] = strict_last(items)
