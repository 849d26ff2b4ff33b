#!/usr/bin/env bash
# CI job: compile every CUDA source for every arch in engine/cuda/arch_features.yaml (nvcc warnings
# and host-compiler warnings are errors), then audit the objects with the gencode check.
#
# Needs nvcc (no GPU). Cost on a 2-core runner: about 55 s of CPU for the attention and KV-store
# sources over 4 archs (8.0, 9.0, 10.0, 12.0), roughly 4.5 s per source and arch for the larger
# sources; a cache hit (same sources, flags and nvcc) costs nothing.
# Usage: ci/fat-build.sh [OUT_DIR]   (default: build/cuda-fat)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
OUT="${1:-build/cuda-fat}"
start=$(date +%s)
"$PY" -m engine.cuda.build --fat --werror --out "$OUT"
echo "fat build: $(( $(date +%s) - start )) s"
"$PY" scripts/check-gencode.py --build-dir "$OUT"
