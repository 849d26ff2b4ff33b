#!/usr/bin/env bash
# The whole test suite: set up; lint, format and type checks (ruff check, ruff format --check, mypy strict
# for checkers/ and the looser config for engine/, both in pyproject.toml); pytest over tests/ (GPU tests
# skip here with their reason); then compile every CUDA source for every arch in the feature table and
# audit the objects (gencode).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy checkers
.venv/bin/mypy engine
.venv/bin/python -m pytest "$@"
if command -v nvcc >/dev/null 2>&1; then
  PYTHON=.venv/bin/python bash ci/fat-build.sh build/cuda-fat
else
  echo "SKIP fat build and gencode audit: nvcc is not installed on this machine"
fi
