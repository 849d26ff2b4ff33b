#!/usr/bin/env bash
# CI job: compile every CUDA source for every arch in engine/cuda/arch_features.yaml (nvcc warnings
# and host-compiler warnings are errors), then audit the objects with the gencode check.
#
# Needs nvcc (no GPU). Measured on the 2-core CI machine: 11 sources x 4 archs (8.0, 9.0, 10.0, 12.0)
# took 194 s of CPU, 338 s wall while the machine was shared (about 100 s when idle); sources compile
# concurrently, one nvcc --threads invocation each, the largest (by the bytes each includes) first so the
# longest do not start last. A cache hit (same sources, flags, nvcc) is free. scripts/test.sh runs this
# beside pytest, whose sm_90 compile checks take these objects (tests/engine/cuda/nvcc_strict.py).
# Usage: ci/fat-build.sh [OUT_DIR]   (default: build/cuda-fat)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
OUT="${1:-build/cuda-fat}"
start=$(date +%s)
"$PY" -m engine.cuda.build --fat --werror --out "$OUT"
echo "fat build: $(( $(date +%s) - start )) s"
"$PY" scripts/check-gencode.py --build-dir "$OUT"
