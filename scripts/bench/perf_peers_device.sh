#!/usr/bin/env bash
# One device call for the ENGINE-PERF measurements (run from the repository root on the GPU machine):
# the tiled attention's numerics (two-pass and fused arms), then the steps of the former `ci/gpu.sh peers` (the six-shape table
# with FlashInfer and SDPA, the fused arm's A/B, the decode step at batch 1 and 32 against its floor and
# the compiled+graphed transformers peer). Wheels in WHEELS (FlashInfer 0.5.3, apache-tvm-ffi,
# nvidia-cudnn-frontend, ruamel.yaml) are installed into /tmp/site first. Results: $OUT (at most 8 files).
set -u
WHEELS="${WHEELS:-../.whl}"
OUT="${OUT:?set OUT}"
. "$(dirname "$0")/wheels.sh"
export VT_CUDA_ARCHS="${VT_CUDA_ARCHS:-9.0}" VT_CUDA_CACHE="${VT_CUDA_CACHE:-$PWD/.vtcache}" PYTHONUNBUFFERED=1
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
python3 -c "import flashinfer; print('flashinfer', flashinfer.__version__)" 2>&1 | tail -1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
W=/tmp/perf-work
mkdir -p "$W"
timeout "${GATE_LIMIT:-200}" python3 -m lab gate kernels --filter attn/tiled --ledger "$OUT/kernels-attn-tiled.json" \
  > "$W/gate.log" 2>&1
echo "gate kernels attn/tiled: rc=$?"
grep -E " (fail|error)$|error" "$W/gate.log" | head -8
tail -n 3 "$W/gate.log"
mkdir -p "$W/ci/ledger"
L=(--ledger "$W/ci/ledger")
{
  timeout 420 python3 -m lab bench bandwidth --workload attn-decode --shapes peers \
    --arms tiled-pipelined,tiled-onepass,flashinfer-tc,flashinfer,sdpa-cudnn,sdpa-flash --plot "$W/ci/attn-peers.png" "${L[@]}"
  timeout 420 python3 -m lab bench decode --no-oracle --hf-compiled --profile "${L[@]}"
  timeout 420 python3 -m lab bench decode --no-oracle --hf-compiled --batch 32 --steps 32 "${L[@]}"
} > "$W/ci.log" 2>&1
cp "$W/ci/attn-peers.png" "$OUT/" 2>/dev/null
tar czf "$OUT/ci-ledger.tgz" -C "$W/ci" ledger 2>/dev/null
tar czf "$OUT/logs.tgz" -C "$W" gate.log ci.log
tail -n 40 "$W/ci.log"
