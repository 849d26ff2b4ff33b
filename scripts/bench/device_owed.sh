#!/usr/bin/env bash
# The GPU runs of ENGINE-PERSISTENT (and the owed checks of ENGINE-LAB and ENGINE-OPENAI), each one call of under
# ten minutes on one GPU, from the repository root of a clean checkout; a session's 30 device minutes hold about
# three, less any refused start (ENGINE-PERSISTENT's spec, "Waits for the device", says which are owed):
#   bash scripts/bench/device_owed.sh correctness   # the gates phase, the CUDA tests of the launchers, the teeth,
#                                                    # the one-pass numerics at d256; then the serving ratios
#   bash scripts/bench/device_owed.sh perf          # issue #40's two tables (lab ci perf)
#   bash scripts/bench/device_owed.sh calib         # the fp32-probs razor on FlashInfer and cuDNN
#   bash scripts/bench/device_owed.sh persistent    # the persistent layer's and step's GPU tests (the arms and their
#                                                    # graph replays included), cases, the step's trace, bench, A/B
#   bash scripts/bench/device_owed.sh splits        # the split-KV table measured (tiled and one-pass arms), and the
#                                                    # one-pass d256 variant's A/B against the pipelined arm
#   bash scripts/bench/device_owed.sh flip          # the one-pass arm's flip protocol (AGENTS.md), its razor beside
#                                                    # FlashInfer and cuDNN under their calibrated limit; FLIP and
#                                                    # FLIP_FILTER name another flag's (FLIP=VT_GEMM_SMALL=1)
#   bash scripts/bench/device_owed.sh ncu           # `lab ci ncu` (the limiter record of the defaults), then the
#                                                    # attention arm's SASS page (lab bench ncu_sass)
#   bash scripts/bench/device_owed.sh limiters      # the b1, b8 and b32 steps' kernels (records), VT_GEMV_PDL at
#                                                    # b2, VT_GEMM_SMALL's range at b4/b8, ncu on cuBLAS at 32 rows
#                                                    # and on the b1 step's GEMVs
#   bash scripts/bench/device_owed.sh lt            # cuBLASLt's candidate algorithms against cuBLAS's pick at 32, 8 and
#                                                    # 16 rows (lab bench gemm_lt: Qwen3-0.6B's four projections)
#   bash scripts/bench/device_owed.sh variants      # the A/B of the variants kept as patches against main (VARIANTS=step:
#                                                    # the step alone, b1 three times, b2, b8)
#                                                    # (gpu_bisect.sh; prepare them here first, carry .dev/bisect):
#                                                    # attention cases and peer shapes, step tokens and time
# Before: `python -m lab.gates.ledger manifest` (carry .tree-manifest.json: records name a clean commit) and the
# wheels the device image lacks in WHEELS (default .whl; carry it): ruamel.yaml, pydantic (+ pydantic_core,
# typing_extensions, annotated_types, typing_inspection), fastapi, starlette, uvicorn, h11, anyio, sniffio, click,
# annotated_doc, idna, jinja2, markupsafe, opentelemetry-api (+ importlib_metadata, zipp), flashinfer-python 0.5.3,
# apache-tvm-ffi 0.1.15, nvidia-cudnn-frontend 1.32.0 (`pip download --no-deps --only-binary=:all:
# --python-version 3.12 --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 ...`: pydantic_core's
# wheel carries only the older tag; pin it to the version pydantic's metadata names). Results: two files in $OUT (a
# device call returns at most 8), rewritten every 20 s so a call stopped at its limit still returns them: logs.txt
# (each log's last 400 lines) and records.tgz (everything the call wrote: records, tables, whole logs). Back here,
# `python -m lab.gates.ledger_unpack records.tgz` puts each distinct record into .agents/ledger under a free name.
set -u
case "${1:-correctness}" in
  correctness | perf | calib | persistent | splits | flip | ncu | limiters | lt | variants) ;;
  *) echo "usage: $0 [correctness|perf|calib|persistent|splits|flip|ncu|limiters|lt|variants]" >&2; exit 2 ;;
esac
WHEELS="${WHEELS:-.whl}"
OUT="${OUT:?set OUT}"
. "$(dirname "$0")/wheels.sh"
export VT_CUDA_ARCHS="${VT_CUDA_ARCHS:-9.0}" PYTHONUNBUFFERED=1
R=/tmp/owed-${1:-correctness}
rm -rf "$R"  # a machine kept warm across calls keeps /tmp: an earlier call's records must not ride in records.tgz
mkdir -p "$R/ledger"
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }

correctness() {
  timeout 100 python3 -m engine.cuda.build > "$R/build.log" 2>&1; echo "build rc=$? at $(el) s"
  ( timeout 300 python3 -m lab ci gates --out "$R/ci" > "$R/ci.log" 2>&1; echo "lab ci gates rc=$?" >> "$R/ci.log"
    timeout 90 python3 -m lab gate tokens --device cuda --dtype bfloat16 > "$R/tokens.log" 2>&1
    echo "tokens rc=$?" >> "$R/tokens.log" ) &
  groups=$!
  ( timeout 320 python3 -m lab ci teeth --out "$R/teeth" > "$R/teeth.log" 2>&1; echo "lab ci teeth rc=$?" >> "$R/teeth.log"
    cp "$R"/teeth/ledger/*.json "$R/ledger/" 2>/dev/null ) &  # each step's catch rates, a record
  groups="$groups $!"
  ( timeout 300 python3 -m pytest -q -rs -p no:cacheprovider tests/engine/cuda tests/engine/test_kernels_device.py \
      tests/engine/test_kernels_checks.py tests/engine/test_kernels_by_name.py > "$R/cuda-tests.log" 2>&1
    echo "cuda tests rc=$?" >> "$R/cuda-tests.log"
    timeout 90 python3 -m lab gate kernels --filter attn/tiled_onepass --filter attn/splitkv_swap \
      --filter attn/warp_d128 --ledger "$R/ledger/kernels-attn.json" > "$R/kernels.log" 2>&1
    echo "kernels rc=$?" >> "$R/kernels.log" ) &
  groups="$groups $!"
  wait $groups; echo "correctness done at $(el) s"  # these three: a bare `wait` also waits for the log saver
  tail -n 22 "$R/ci.log"; tail -n 8 "$R/teeth.log"; tail -n 6 "$R/cuda-tests.log"
  grep -E "norm_qkv|norm_mlp|PASS|FAIL|rc=" "$R/tokens.log" | head -12; tail -n 3 "$R/kernels.log"
  timeout 110 python3 -m lab bench serving --requests 256 --reps 1 --max-len 512 --ledger "$R/ledger" > "$R/serving.log" 2>&1
  echo "bench serving rc=$? at $(el) s"; tail -n 8 "$R/serving.log"
}

perf() {
  # PERF_STEP='perf-*' runs the timed steps alone: a second call on a machine whose peers' caches the first filled
  timeout 590 python3 -m lab ci perf --out "$R/perf" ${PERF_STEP:+--step "$PERF_STEP"} > "$R/perf.log" 2>&1
  echo "lab ci perf rc=$? at $(el) s"
  tail -n 14 "$R/perf.log"; cat "$R/perf/logs/perf-report.log" 2>/dev/null | head -40
  cp "$R"/perf/ledger/*.json "$R/ledger/" 2>/dev/null  # (the persistent layer's bench runs in `persistent`)
}

persistent() {  # the persistent layer's and step's GPU run: tests, cases, the step's trace, bench, the step's A/B
  timeout 60 python3 -m engine.cuda.build > "$R/build.log" 2>&1; echo "build rc=$? at $(el) s"  # in parallel, once
  timeout 60 python3 -m pytest -q tests/engine/cuda/test_persistent.py -rs > "$R/persistent-tests.log" 2>&1
  echo "persistent tests rc=$? at $(el) s"; tail -n 6 "$R/persistent-tests.log"
  timeout 60 python3 -m lab.persistent.trace --json "$R/trace-b1.json" --ledger "$R/ledger" > "$R/trace.log" 2>&1
  echo "persistent step trace rc=$? at $(el) s"; tail -n 16 "$R/trace.log"
  for take in async after-signal; do  # the kernel's other take points (engine/cuda/persistent.py TAKES), the same bits
    timeout 30 python3 -m lab.persistent.trace --take $take --ledger "$R/ledger" > "$R/trace-$take.log" 2>&1
    echo "persistent step trace --take $take rc=$? at $(el) s"; grep -E "^(span|block-time)" "$R/trace-$take.log"
  done
  timeout 40 python3 -m lab.persistent.trace --batch 8 --json "$R/trace-b8.json" --ledger "$R/ledger" \
    > "$R/trace-b8.log" 2>&1  # the issue asks what the step does at b8 too: its phases
  echo "persistent step trace b8 rc=$? at $(el) s"; tail -n 12 "$R/trace-b8.log"
  timeout 60 python3 -m lab gate kernels --filter persistent --ledger "$R/ledger/kernels-persistent.json" \
    > "$R/persistent-kernels.log" 2>&1
  echo "persistent cases rc=$? at $(el) s"; tail -n 16 "$R/persistent-kernels.log"
  timeout 80 python3 -m lab bench persistent_layer --ledger "$R/ledger" > "$R/persistent.log" 2>&1
  echo "persistent_layer bench rc=$? at $(el) s"; tail -n 12 "$R/persistent.log"
  timeout 100 python3 -m lab bench ab --flag VT_PERSISTENT_STEP --workload decode-step --reps 6 --ledger "$R/ledger" \
    > "$R/ab-step.log" 2>&1  # the decode step A/B in one process, Qwen3-0.6B's shape at b1
  echo "bench ab VT_PERSISTENT_STEP rc=$? at $(el) s"; tail -n 10 "$R/ab-step.log"
  VT_PERSISTENT_STEP=1 timeout 60 python3 -m lab bench decode --no-oracle --steps 16 --profile \
    > "$R/decode-step-arm.log" 2>&1  # the step's share of its floor and its kernels a step with the arm on
  echo "bench decode VT_PERSISTENT_STEP=1 rc=$? at $(el) s"; tail -n 14 "$R/decode-step-arm.log"
}

splits() {  # tables to commit as engine/data/attn_splits/<card>-{tiled,onepass}.json (the records to .agents/ledger)
  timeout 100 python3 -m engine.cuda.build > "$R/build.log" 2>&1; echo "build rc=$? at $(el) s"  # a bare machine
  timeout 30 python3 -m pytest -q -rs tests/engine/cuda/test_split_table.py tests/lab/bench/test_splits_bench.py \
    > "$R/splits-tests.log" 2>&1; echo "split table tests rc=$? at $(el) s"; tail -n 4 "$R/splits-tests.log"
  timeout 240 python3 -m lab bench splits --ledger "$R/ledger" --out "$R/tiled.json" > "$R/splits.log" 2>&1
  echo "bench splits rc=$? at $(el) s"; tail -n 12 "$R/splits.log"
  timeout 120 python3 -m lab bench splits --arm onepass --rows 8,32,128,512 --contexts 1024,4096,32768 \
    --ledger "$R/ledger" --out "$R/onepass.json" > "$R/splits-onepass.log" 2>&1
  echo "bench splits --arm onepass rc=$? at $(el) s"; tail -n 8 "$R/splits-onepass.log"
  timeout 60 python3 -m lab bench bandwidth --workload attn-decode --shape hq=16,hkv=2,d=256 \
    --arms tiled-pipelined,tiled-onepass --reps 6 --ledger "$R/ledger" > "$R/d256-ab.log" 2>&1
  echo "d256 A/B rc=$? at $(el) s"; tail -n 6 "$R/d256-ab.log"  # the one-pass d256 variant against the pipelined arm
}

calib() {
  timeout 500 python3 -m lab ci calib --razor-setting fp32-probs --out "$R/calib" > "$R/calib.log" 2>&1
  echo "lab ci calib rc=$? at $(el) s"; tail -n 14 "$R/calib.log"
  cp "$R"/calib/ledger/*.json "$R/ledger/" 2>/dev/null
  for f in "$R"/calib/logs/calib-*.log; do echo "== $f"; grep -vE "Warning|warn\(" "$f" | tail -n 6; done
}

flip() {  # the gates with FLIP's settings (lab/ci.py flip_steps), three at once; each step's verdict in the table.
  # Default: the one-pass arm; the small GEMM's is `FLIP=VT_GEMM_SMALL=1 FLIP_FILTER=gemm_small
  # FLIP_PROMPT_LENS=1,6,13,31,2,9,17,33 ... flip` (8 prompts decode 8 rows at once, inside the 3-8 it takes; with
  # the razor's 16 its arm ran on no model, 2026-12-06)
  FLIP="${FLIP:-VT_ATTN_ONEPASS=1}" FLIP_FILTER="${FLIP_FILTER-attn/tiled_onepass}" timeout 570 python3 -m lab ci flip \
    --out "$R/flip" > "$R/flip.log" 2>&1
  echo "lab ci flip rc=$? at $(el) s"; grep -E "^(step|flip-|build|ci:)" "$R/flip.log" | tail -n 24
  cp "$R"/flip/ledger/*.json "$R/ledger/" 2>/dev/null
  for f in "$R"/flip/logs/flip-neartie-*.log; do echo "== $f"; grep -E "^run |limit" "$f" | cut -c1-220; done
}

ncu() {  # `lab ci ncu`: the limiter table of today's defaults as a ledger record (lab/ci.py NCU_RUNS: the one-pass arm
  # at four peer shapes, cuDNN at b1 ctx1024, the streamed GEMV, cuBLAS at 32 rows); then the one-pass arm's SASS page
  # at b1 ctx32768, summarised (`timeout` runs the ncu binary; `--clock-control none` leaves the clocks alone)
  timeout 300 python3 -m lab ci ncu --out "$R/ncu" > "$R/ncu.log" 2>&1; echo "lab ci ncu rc=$? at $(el) s"
  tail -n 14 "$R/ncu.log"; cat "$R/ncu/ncu-table.md" 2>/dev/null | head -30
  cp "$R"/ncu/ledger/*.json "$R/ledger/" 2>/dev/null
  local attn="python3 -m lab bench bandwidth --workload attn-decode --reps 2 --timing eager --inner 1"
  local sass="--section SourceCounters --section WarpStateStats --section MemoryWorkloadAnalysis_Tables"
  timeout 90 ncu --clock-control none --kernel-name regex:"onepass|tiled" --launch-count 1 $sass \
    -o "$R/attn-b1" $attn --arms default --shape batch=1,ctx=32768,hq=32,hkv=8,d=128 > "$R/ncu-attn-sass.log" 2>&1
  echo "ncu attention SASS rc=$? at $(el) s"
  timeout 40 ncu --import "$R/attn-b1.ncu-rep" --page source --csv --print-source sass > "$R/attn-b1-sass.csv" 2>&1
  timeout 20 python3 -m lab bench ncu_sass "$R/attn-b1-sass.csv" --top 6 --json "$R/attn-b1-sass.json" \
    > "$R/attn-b1-sass.log" 2>&1
  echo "ncu_sass attn-b1 rc=$? at $(el) s"; cat "$R/attn-b1-sass.log"
}

limiters() {  # what bounds the b1 and b32 steps where they miss their targets: each step's kernels (records), and
  # ncu on cuBLAS's 32-row projections (the b32 step's weights stream at a quarter of the copy; the small GEMM lost)
  timeout 100 python3 -m engine.cuda.build > "$R/build.log" 2>&1; echo "build rc=$? at $(el) s"
  for b in 1 8 32; do  # each profile decodes its batch (before 2026-12-06 the first sequence alone: a b1 step)
    timeout 60 python3 -m lab bench decode --no-oracle --batch $b --steps 32 --profile --ledger "$R/ledger" \
      > "$R/profile-b$b.log" 2>&1
    echo "b$b profile rc=$? at $(el) s"; grep -E "engine step|fraction|kernels per step|device time" "$R/profile-b$b.log"
    grep -A14 "^top " "$R/profile-b$b.log"
  done
  timeout 45 python3 -m lab bench ab --flag VT_GEMV_PDL --workload decode-step --shape batch=2 --reps 4 \
    --ledger "$R/ledger" > "$R/ab-pdl-b2.log" 2>&1  # PDL where the GEMVs run past 1 row
  echo "ab VT_GEMV_PDL at b2 rc=$? at $(el) s"; tail -n 4 "$R/ab-pdl-b2.log"
  for b in 4 8; do  # the small GEMM within its won range (o and down at 3-8 rows) against cuBLAS in the step
    timeout 40 python3 -m lab bench ab --flag VT_GEMM_SMALL --workload decode-step --shape batch=$b --reps 4 \
      --ledger "$R/ledger" > "$R/ab-small-b$b.log" 2>&1
    echo "ab VT_GEMM_SMALL at b$b rc=$? at $(el) s"; tail -n 4 "$R/ab-small-b$b.log"
  done
  local sections="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats"
  timeout 100 ncu --clock-control none --kernel-name regex:"nvjet|xmma|cutlass|gemm_bf16|gemmSN|splitK" \
    --launch-count 12 $sections python3 -m lab bench gemm_small --rows 32 --reps 2 > "$R/ncu-cublas-m32.log" 2>&1
  echo "ncu cuBLAS at 32 rows rc=$? at $(el) s"; grep -E "^  [a-zA-Z_]|Duration|DRAM Throughput|Grid Size|Registers Per|Achieved Occ" \
    "$R/ncu-cublas-m32.log" | cut -c1-150 | head -80
  # the b1 step's GEMVs one at a time, past the warm-up: each at what share of DRAM (ncu matches the kernel's own
  # name, not its namespace: `regex:gemv` matched none on 2026-12-06)
  timeout 75 ncu --clock-control none --kernel-name regex:"stream_kernel|stream_norm_kernel" --launch-skip 120 \
    --launch-count 10 $sections \
    python3 -m lab bench decode --no-oracle --batch 1 --steps 4 > "$R/ncu-gemv-b1.log" 2>&1
  echo "ncu the b1 step's GEMVs rc=$? at $(el) s"; grep -E "^  [a-zA-Z_]|Duration|DRAM Throughput|Grid Size|Achieved Occ" \
    "$R/ncu-gemv-b1.log" | cut -c1-150 | head -70
}

lt() {  # cuBLASLt's other algorithms for the decode projections against what cuBLAS picks unasked: the b32 step's
  # GEMMs stream W at about a third of DRAM's rate and the b8 step's are 44% of it (lab bench gemm_lt, no build)
  for rows in 32 8 16; do
    timeout 150 python3 -m lab bench gemm_lt --rows $rows --ledger "$R/ledger" > "$R/gemm-lt-m$rows.log" 2>&1
    echo "gemm_lt at $rows rows rc=$? at $(el) s"; tail -n 9 "$R/gemm-lt-m$rows.log"
  done
}

variants() {  # every variant prepared here beside main (`bash scripts/bench/gpu_bisect.sh prepare main
  # scripts/bench/variants/*.patch`, carrying .dev/bisect): the attention's numerics cases and the six peer shapes,
  # the graphed step's tokens and its time at b1 and b32; a variant rebuilds the sources that include a header it
  # changed. Three trees (main and two variants) fit the call. VARIANTS=step, for a variant outside the attention:
  # the step's tokens at 2 rows and at 1 (the GEMVs' rows), then its time at b1 twice (one run's noise is a few
  # percent) and at b2;
  # LIMIT (seconds a tree, default 170) larger where fewer trees are prepared
  local bisect="$(dirname "$0")/gpu_bisect.sh" cmd
  cmd='python3 -m lab gate kernels --filter attn | tail -1; python3 -m lab bench bandwidth --workload attn-decode \
    --shapes peers --arms default --reps 6 | tail -9; python3 -m lab gate tokens --device cuda --dtype bfloat16 \
    | tail -1; for b in 1 32; do python3 -m lab bench decode --no-oracle --batch $b --steps 32 \
    | grep -E "engine step|fraction"; done'
  [ "${VARIANTS:-}" = step ] && cmd='for lens in 1,6 5; do python3 -m lab gate tokens --device cuda --dtype \
    bfloat16 --prompt-lens $lens | tail -1; done; for b \
    in 1 1 2; do echo "batch $b"; python3 -m lab bench decode --no-oracle --batch $b --steps 32 \
    | grep -E "engine step|fraction"; done'
  # each tree builds its sources in parallel first (an unchanged one comes from the shared cache), not one by one
  # as its command first loads them
  timeout 560 env OUT="$R" LIMIT="${LIMIT:-170}" bash "$bisect" run -- bash -c "python3 -m engine.cuda.build \
    > /dev/null 2>&1; $cmd"
  echo "the variants' A/B rc=$? at $(el) s"
  cp "$R/bisect.txt" "$R/bisect.log" 2>/dev/null; cat "$R/bisect.txt"
}

save() {
  tail -n 400 "$R"/*.log > "$OUT/logs.txt" 2>/dev/null
  tar czf "$OUT/records.tgz" -C "$R" --exclude='*.so' . 2>/dev/null
}
( while sleep 20; do save; done ) &
saver=$!
"${1:-correctness}"
kill "$saver" 2>/dev/null
save
