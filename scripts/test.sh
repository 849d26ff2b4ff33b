#!/usr/bin/env bash
# The whole test suite: set up, run pytest over tests/ (GPU tests skip here with their reason), then
# compile every CUDA source for every arch in the feature table and audit the objects (gencode).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
.venv/bin/python -m pytest "$@"
if command -v nvcc >/dev/null 2>&1; then
  PYTHON=.venv/bin/python bash ci/fat-build.sh build/cuda-fat
else
  echo "SKIP fat build and gencode audit: nvcc is not installed on this machine"
fi
