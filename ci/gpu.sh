#!/usr/bin/env bash
# GPU job (a machine with an NVIDIA GPU; the CPU CI has none): graphed decode and the token gates on
# the GPU, compute-sanitizer on one graphed decode of each tiny model, then the benchmarks.
# Each step has its own time limit, so a slow one cannot hide the others; a table comes last.
# Usage (repository root): OUT=DIR bash ci/gpu.sh [gates] [bench] [step] [serve] [prefill] [throughput-ab] [quant]
#   [quant-flip] [quant-flip-ab] [peers] [fuse] [step2] [flip] [ncu] [ncu2] [reach] [qwen3next] [qwen3next-bf16]
#   [qwen3next-bench] [gdn-flip] [calib] [perf-jit] [perf-tables] [teeth-gpu]
#   reach: every attention arm of the kernel table reached by a gate model (lab/data/gate_models.py: head_dim
#   64/128/256, 1-16 query heads per KV head, a sliding-window layer in each, 1500+-token prompts in `long`),
#   each run through the token gate and the near-tie razor in bf16; the per-arm reach table is printed last
#   (every run's verdicts in $OUT/reach/reach-runs.txt); fails when an arm has 0 calls. Before it, the tiled arm's
#   numerics on the `long` model's decode shape (--filter long-gate); after the table, the diagnostics of the long
#   context (the oracle against itself, the tiled arm with 1/4/26 splits, the fp32 twin's view of each position
#   out of band).
#   calib: the near-tie razor's calibration on production kernels (issue #19): the bf16 razor at its defaults on the
#   head_dim-128 models (gate models d128-g4 and long; the d128 tiny model) with paged decode attention taken by SDPA
#   cuDNN and FlashInfer with and without tensor cores (`--attn-peer`, eager decode, the engine's paged cache) and by
#   the engine's defaults, each run judged against the eager oracle and against transformers' SDPA (fp32 scores:
#   production numerics), one process per model, one ledger record per run; within 6 minutes. FlashInfer's four bf16
#   d128 modules are JIT-compiled first, at once; the peer x model x oracle verdict table is printed last.
#   serve: engine.LLM's GPU tests (sampling inside the captured decode step: replay and eager agree,
#   seeds reproduce), then the throughput benchmark (256 requests, lengths uniform in [100, 1024],
#   Qwen3-0.6B's shape, against transformers' batched generate) with its plot and ledger record.
#   prefill: the varlen prefill/extend attention kernel (VT_PREFILL_ATTN) and the serving sampler's fused draw
#   (VT_SAMPLE_ROWS_KERNEL): their numerics cases against the references (lab/gates/cases/prefill.py and
#   sample_rows.py, one ledger record), memcheck on the small ones, their GPU tests, the serving GPU tests
#   with VT_PREFILL_ATTN on (tokens equal to the flag-off run, counters showing its arms ran), then the
#   throughput benchmark with all three off, the first on, the first two on, then VT_ASYNC_SCHEDULE on top
#   (the next decode step scheduled and staged while the current one runs), in one run, and the time-bounded transformers
#   peer; the throughput table is printed last. throughput-ab: that benchmark step alone. Both (and serve) run
#   the Qwen3-Next serving GPU tests (tests/engine/test_llm_qwen3_next.py: engine.LLM's graphed steps with the
#   gated delta net's state slots, fp32 token-exact against transformers, bf16 graphed equal to eager).
#   peers: paged decode attention on the six shapes against FlashInfer (with and without tensor cores, on
#   the same paged cache; a "not installed" row where it is absent) and the SDPA peers: the default tiled arm
#   (the table's ratios) and the one-pass arm (OFF); then the decode step at batch 1 (with its kernel profile)
#   and 32 against its floor and transformers with a static cache, torch.compile(fullgraph=True) and a CUDA
#   graph. Both tables are printed last, by `lab report perf` over the phase's ledger records.
#   teeth-gpu: `lab gate teeth --device cuda` (TEETH_RAZOR, default fp32-probs; TEETH_SEEDS, default 10), the seeded
#   bugs and twins split over four processes at once (the tiny models leave the GPU idle; one CPU thread each),
#   within TEETH_LIMIT (270) seconds; each bug's catch rate and each twin's false alarms, then how many processes
#   finished and failed (a FAIL: a bug under 9/10 or a twin over 1/10). calib with CALIB_RAZOR=fp32-probs judges the
#   production kernels by that setting (`gate neartie --razor-setting fp32-probs`, the online oracle).
#   perf-jit: what perf-tables would otherwise spend its time on, on a fresh machine: the engine's CUDA build and
#   FlashInfer's JIT modules for the six shapes (four at once; PERF_JIT_LIMIT, 200 s); run it in the call before.
#   perf-tables: the two tables of issue #40 within 5 minutes, from ledger records with provenance: the default
#   attention arm and the four peers at the six shapes, the decode step at batch 1, 8 and 32 against its floor and the
#   compiled transformers peer (no profile), then `python -m lab report perf --ledger $OUT/ledger` (each row's
#   record, commit, tree and age; exit 1 while a row has no clean record). PERF_ATTN_LIMIT / PERF_DECODE_LIMIT
#   (seconds, default 110 / 60) bound the steps; a step cut short leaves its rows `no record`.
#   step: the decode step's fast arms: each model-wide flag's A/B on the whole step, the GEMV at the
#   Qwen3-0.6B decode shapes against F.linear, and the step with every such arm on.
#   quant: the quantized checkpoints: each tiny AWQ/GPTQ/NVFP4 one token-exact in bf16 against transformers on
#   its dequantized twin (default flags and each dequant arm), generate and memcheck on each, and the
#   decode-step A/B of VT_DEQUANT_GEMV on the Qwen3-0.6B-shaped quantized models (ledger records).
#   quant-flip: the flip protocol of VT_DEQUANT_KERNEL (dequant, then the GEMM, at M > 1), each step's limit set so the
#   phase ends within 6 minutes: the tiny AWQ, GPTQ act-order and NVFP4 checkpoints token-exact in bf16 against
#   transformers on their dequantized twins and through the near-tie razor, the flag on and its arm required (batched:
#   prefill and decode at M > 1), then its A/B on the whole decode step at batch 32 of the Qwen3-0.6B-shaped AWQ model;
#   a verdict table last. quant-flip-ab: that A/B on the GPTQ and NVFP4 models (about 4 minutes). quant-flip-baseline:
#   the AWQ razor with the flag off (its dequant is bitwise equal to the reference: the same verdict shows the path's).
#   fuse: the decode step's fused launches (VT_QKV_ROPE_STORE, VT_NORM_GEMV, VT_GLU_GEMV, VT_GEMV_PDL,
#   VT_GEMV_PERSISTENT; VT_ACT_GEMV by numerics only): their numerics cases, each arm's op-level A/B against the
#   default kernels in the same run, each flag's A/B on the whole decode step against the defaults, the greedy tokens
#   of the step with all on against the defaults at batch 1 and 32 (with the arms' counters), and the decode step off
#   and on against its floor; a compact table last.
#   step2: the streamed GEMV (VT_GEMV_STREAM) and the norm kernels' early PDL trigger (VT_GEMV_PDL) over the three
#   winning fused arms: their numerics, GPU tests, op-level A/Bs at Qwen3-0.6B's five GEMV shapes (and the norm / GLU
#   forms), whole-step A/Bs, the decode step with and without them against its floor; a compact table last.
#   qwen3next: the gated delta net kernels' numerics (decode step and chunked prefill against their references),
#   their CUDA tests, then the tiny Qwen3-Next checkpoints token-exact against transformers on the GPU (fp32 and
#   bf16, GDN arms off and on, graphed decode equal to eager), the fp32 and bf16 token gates with the GDN arms
#   on (--require-arm: their counters must be nonzero); verdict lines last. qwen3next-bf16: the bf16 evidence
#   alone (the razor-prompt test, with the oracle's own razor printed, and the token gates).
#   qwen3next-bench: the same-binary A/B of each GDN kernel against its torch reference at Qwen3-Next-80B's heads
#   (decode at batch 32, the chunked prefill of 1024 tokens), ledger records.
#   gdn-flip: the flip protocol of VT_GDN_KERNEL and VT_GDN_CHUNKED_KERNEL within 6 minutes: their numerics, the model
#   GPU tests (token-exact against transformers fp32 and bf16, graphed decode equal to eager), the fp32 and bf16 token
#   gates with both arms required (bf16: token-exact against generate, not the razor; the row's spec), the A/B of
#   VT_GDN_KERNEL on the whole decode step of a Qwen3-Next with Qwen3-Next-80B's layer shapes (decode-step-qwen3next,
#   batch 32) and the chunked prefill's A/B (1024 tokens); a verdict table last. gdn-flip-decode: the bf16 token gate
#   with the decode kernel alone (required), then with both references (about a minute).
#   ncu: Nsight Compute on the default attention arm (three shapes) and the GEMV kernel, the
#   speed-of-light, occupancy, launch and warp-state sections; key lines in $OUT/ncu-summary.txt.
#   ncu2: the limiter of each ENGINE-PERF miss, measured with Nsight Compute within 5 minutes (NCU2_BUDGET seconds
#   of build and ncu runs, 8-14 s a run; a run with under 20 s left is skipped; then the table): the tiled,
#   tiled-pipelined and tiled-fused attention arms and FlashInfer-TC at each of the six peer shapes in turn
#   (NCU2_ATTN_ARMS), the GEMV's default, gemv-stream and gemv-stream-pdl arms at q/k/v and the head, the batch-32
#   step's largest cuBLAS GEMMs (NCU2_PARTS="attn gemv gemm" picks the parts); only the
#   last call of each `bench launch` (its NVTX range `profile`). The table (one row per
#   kernel: duration, DRAM %, occupancy and its limiter, registers, shared memory, top stalls; `bench ncu_table`)
#   is printed last, written to $OUT/ncu2-table.md and a ledger record.
#   flip: the flip protocol (AGENTS.md) with the flag settings under test, all steps with them set; the
#   near-tie and token gates fail when no arm of a flag set on ran (the table's selection counters):
#   a flag whose ops a model never calls is n/a there and must run on another model (flip-ran-VT_X); the
#   head_dim-128 model's razor (336-position contexts) has the bf16 oracle's fp32 twin as second judge. The razor's
#   setting (oracle attention, budgets) is the one the kernel table names for the arms under test (`Arm.razor`,
#   picked by `gate neartie --require-arm`). Models: dense d128 moe; a flip whose flags are all VT_ATTN_* (decode
#   attention alone): d128 and the gate models d128-g4 and long (1500+-token prompts, fp32 twin as second judge).
#   FLIP_PROMPT_LENS="1,6,13,31,2,9,17,33" sets the razor's prompts but long's (8: a GEMV arm takes 8 rows at most).
#   OUT=DIR FLIP="VT_X=1 VT_Y=1" [FLIP_FILTER="attn/ kv_store/"] [FLIP_MODELS="dense d128 moe d128-g4 long"]
#   [FLIP_PROMPT_LENS=N,..] bash ci/gpu.sh flip
# Ledger records (schema 2) name the commit they measured and refuse a tree that differs from it. On a copy of
# the tree without .git (a device machine), write the manifest in the clean checkout first and carry it:
# `python -m lab.gates.ledger manifest` (.tree-manifest.json, git-ignored); a tool given --allow-dirty records
# a modified copy as dirty instead of refusing it.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT/ledger"
PY="${PYTHON:-python3}"
export VT_CUDA_ARCHS="${VT_CUDA_ARCHS:-9.0}" VT_CUDA_CACHE="${VT_CUDA_CACHE:-/tmp/vt-cuda-cache}" PYTHONUNBUFFERED=1
PHASES="${*:-gates bench}"
FLIP="${FLIP:-}"
if [[ " $PHASES " == *" flip "* ]]; then  # checked before any phase runs
  if [[ -z "$FLIP" ]]; then
    echo "ci/gpu.sh flip: set FLIP to the flag settings under test, e.g. FLIP=\"VT_ATTN_SPLITKV=1\"" >&2
    exit 2
  fi
  for kv in $FLIP; do
    if [[ ! "$kv" =~ ^VT_[A-Z0-9_]+=[^[:space:]]*$ ]]; then
      echo "ci/gpu.sh flip: FLIP entry '$kv' is not VT_NAME=VALUE" >&2
      exit 2
    fi
  done
  for m in ${FLIP_MODELS:-}; do
    if [[ ! " dense d128 moe d128-g4 long " == *" $m "* ]]; then
      echo "ci/gpu.sh flip: FLIP_MODELS entry '$m' is not dense, d128, moe, d128-g4 or long" >&2
      exit 2
    fi
  done
fi
declare -A RESULT
ORDER=()
step() {  # step NAME LIMIT CMD...: log to $OUT/logs/NAME.log, keep rc and seconds
  local name=$1 limit=$2 t0 rc
  shift 2
  mkdir -p "$OUT/logs"
  t0=$(date +%s)
  timeout "$limit" "$@" > "$OUT/logs/$name.log" 2>&1
  rc=$?
  RESULT[$name]="rc=$rc $(( $(date +%s) - t0 ))s"
  ORDER+=("$name")
  echo "== $name: ${RESULT[$name]}"
  tail -n "${STEP_TAIL:-12}" "$OUT/logs/$name.log"
  arms_of "$OUT/logs/$name.log"
}
arms_of() {  # LOG: the kernel arms a gate ran (engine/kernels/table.py's counters), when it printed them
  awk '/^arms/ {p = 1; print; next} p && /^  / {print; next} {p = 0}' "$1" | sed 's/^/   /'
}
na_if_refused() {  # NAME: the distributional gate refuses where the oracle is deterministic: not applicable
  if grep -q '^distributional: REFUSED' "$OUT/logs/$1.log"; then
    RESULT[$1]="n/a: oracle deterministic (${RESULT[$1]})"
  fi
}
BUILT=0
build_once() {  # [LIMIT]: the first phase's limit (a 6-minute phase passes its own)
  if [[ $BUILT == 0 ]]; then step build "${1:-240}" $PY -m engine.cuda.build; BUILT=1; fi
}
verdicts() {  # STEP...: each step's rc and the verdict line of its log (gate, numerics, A/B or pytest)
  local n v
  for n in "$@"; do
    [[ -f "$OUT/logs/$n.log" ]] || continue
    v=$(grep -E '^(tokens|neartie): |^verdict: |cases within tolerance| (passed|failed|error)' "$OUT/logs/$n.log" \
      | tail -n 1)
    # a gate that never ran the arm under test says so above its verdict; an A/B adds its outputs' difference
    v+=$(grep -E '^FAIL: no arm|^max \|on - off\||^arms gated by' "$OUT/logs/$n.log" | sed 's/^/; /' | tr -d '\n')
    printf '%-34s %-9s %s\n' "$n" "${RESULT[$n]}" "${v:-(no verdict line: logs/$n.log)}"
  done
}
MOE=/tmp/tiny-qwen3-moe
# head_dim 128: the embedded tiny model's 32 runs only the generic attention arm; the warp, GQA-fused
# and split-KV arms need 64, 128 or 256
D128=/tmp/tiny-qwen3-d128
GATES=/tmp/flip-gate-models  # lab/data/gate_models.py's d128-g4 and long, for the flip phase
long_lens() {  # the long gate model's own prompt lengths (1500+ tokens: the tiled arms' several KV splits)
  $PY -c "from lab.data.gate_models import GATE_MODELS as G; print(*G['long'].prompt_lens, sep=',')"
}
# Flags that are correct but not byte-exact and still OFF: the near-tie razor holds them to the oracle.
FAST="VT_ATTN_SPLITKV=1 VT_ATTN_SPLITKV_GQA_SWAP=1 VT_MOE_KERNELS=1"

if [[ " $PHASES " == *" gates "* ]]; then
  build_once
  step runner-gpu-tests 180 $PY -m pytest tests/engine/test_runner.py tests/engine/test_graph_splitkv.py \
    tests/lab/bench/test_decode_profile.py -m gpu -q -p no:cacheprovider
  step make-moe 60 $PY -c "from lab.data.make_tiny import build, build_moe
build_moe().save_pretrained('$MOE'); build(head_dim=128).save_pretrained('$D128')"
  step tokens-dense-graph 120 $PY -m lab gate tokens --device cuda --dtype bfloat16
  step tokens-dense-eager 120 env VT_EAGER=1 $PY -m lab gate tokens --device cuda --dtype bfloat16
  step tokens-moe 120 $PY -m lab gate tokens --device cuda --dtype bfloat16 --model "$MOE"
  step tokens-moe-kernels 120 env VT_MOE_KERNELS=1 $PY -m lab gate tokens --device cuda --dtype bfloat16 --model "$MOE"
  step neartie-dense-fast 120 env $FAST $PY -m lab gate neartie --device cuda --dtype bfloat16
  step neartie-moe-fast 120 env $FAST $PY -m lab gate neartie --device cuda --dtype bfloat16 --model "$MOE"
  # head_dim 32 takes the generic attention arm; the head_dim-128 model runs the default tiled arm
  step neartie-d128 180 $PY -m lab gate neartie --device cuda --dtype bfloat16 --model "$D128" \
    --max-new-tokens 300
  step memcheck-dense 180 compute-sanitizer --tool memcheck --error-exitcode 9 \
    $PY -m engine generate --device cuda --dtype bfloat16 --max-new-tokens 4
  step memcheck-moe 180 env VT_MOE_KERNELS=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
    $PY -m engine generate --device cuda --dtype bfloat16 --max-new-tokens 4 --model "$MOE"
fi

if [[ " $PHASES " == *" bench "* ]]; then
  L=(--ledger "$OUT/ledger")
  step bw-attn-b64 150 $PY -m lab bench bandwidth --workload attn-decode "${L[@]}" \
    --sweep ctx=1024,4096,16384 --plot "$OUT/attn-bandwidth.png"
  step bw-attn-b1-32k 120 $PY -m lab bench bandwidth --workload attn-decode --shape batch=1,ctx=32768 "${L[@]}"
  step bw-attn-d256 120 $PY -m lab bench bandwidth --workload attn-decode --shape hq=16,hkv=2,d=256 "${L[@]}"
  for s in n=4096,k=4096 n=14336,k=4096 n=4096,k=14336; do
    step "bw-gemv-$s" 60 $PY -m lab bench bandwidth --workload gemv --shape "$s" "${L[@]}"
  done
  step ab-splitkv-swap 90 env VT_ATTN_TILED=0 VT_ATTN_SPLITKV=1 $PY -m lab bench ab --flag VT_ATTN_SPLITKV_GQA_SWAP \
    --shape batch=1,ctx=32768 "${L[@]}"
  step ab-gemv 60 $PY -m lab bench ab --flag VT_GEMV --shape n=4096,k=14336 "${L[@]}"
  step ab-tiled 90 $PY -m lab bench ab --flag VT_ATTN_TILED "${L[@]}"
  for q in awq-gemv gptq-gemv nvfp4-gemv; do  # dequant-GEMV against dequant-then-linear and a dense F.linear
    step "bw-$q" 90 $PY -m lab bench bandwidth --workload "$q" "${L[@]}"
  done
  step ab-norm 60 $PY -m lab bench ab --flag VT_NORM_KERNEL "${L[@]}"
  step decode-0.6b 240 $PY -m lab bench decode "${L[@]}"
  step decode-0.6b-profile 240 $PY -m lab bench decode --profile --no-oracle "${L[@]}"
fi

if [[ " $PHASES " == *" step "* ]]; then
  L=(--ledger "$OUT/ledger")
  build_once
  for f in VT_MERGED_PROJ VT_QK_NORM_ROPE_FUSED VT_GEMV; do
    step "ab-step-$f" 150 $PY -m lab bench ab --flag "$f" --workload decode-step "${L[@]}"
  done
  # Qwen3-0.6B's decode GEMVs: q/k/v merged, o, gate/up merged, down, the tied head
  for s in n=4096,k=1024 n=1024,k=2048 n=6144,k=1024 n=1024,k=3072 n=151936,k=1024; do
    step "bw-gemv-$s" 60 $PY -m lab bench bandwidth --workload gemv --shape "$s" "${L[@]}"
  done
  step bw-attn-step 60 $PY -m lab bench bandwidth --workload attn-decode --shape batch=1,ctx=1024,hq=16,hkv=8 \
    "${L[@]}"
  step decode-fast-profile 240 env VT_MERGED_PROJ=1 VT_QK_NORM_ROPE_FUSED=1 VT_GEMV=1 \
    $PY -m lab bench decode --profile --no-oracle "${L[@]}"
fi

if [[ " $PHASES " == *" serve "* ]]; then
  build_once
  step serve-gpu-tests 300 $PY -m pytest tests/engine/test_llm.py tests/engine/test_sampler.py \
    tests/engine/test_llm_qwen3_next.py -m gpu -q -p no:cacheprovider
  step serve-throughput 570 $PY -m lab bench throughput --requests 256 --sweep 64,256 \
    --plot "$OUT/throughput.svg" --ledger "$OUT/ledger"
fi

if [[ " $PHASES " == *" prefill "* || " $PHASES " == *" throughput-ab "* ]]; then
  build_once
  if [[ " $PHASES " == *" prefill "* ]]; then
    step prefill-numerics 120 $PY -m lab gate kernels --filter prefill/ --filter sample_rows/ \
      --ledger "$OUT/ledger/prefill-kernels.json"
    step prefill-memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 9 \
      $PY -m lab gate kernels --filter prefill/ --filter sample_rows/ --tag small
    step prefill-gpu-tests 150 $PY -m pytest tests/engine/cuda/test_prefill_attn.py \
      tests/engine/cuda/test_sample_rows.py tests/engine/test_llm.py -m gpu -k "(prefill or sample_rows) and not test_case_" \
      -q -p no:cacheprovider -rs
  fi
  step serve-qwen3next 180 $PY -m pytest tests/engine/test_llm_qwen3_next.py -m gpu -q -rA -p no:cacheprovider
  step prefill-throughput 360 $PY -m lab bench throughput --requests 256 --sweep 256 \
    --ab-flag VT_PREFILL_ATTN,VT_SAMPLE_ROWS_KERNEL,VT_ASYNC_SCHEDULE --ab-reps 2 --peer-budget-s 30 \
    --ledger "$OUT/ledger"
fi

if [[ " $PHASES " == *" quant "* ]]; then
  L=(--ledger "$OUT/ledger")
  QUANT=/tmp/tiny-qwen3-quant
  build_once
  step quant-gpu-tests 900 $PY -m pytest tests/engine/model/test_quant_gpu.py -m gpu -q -p no:cacheprovider \
    --junitxml "$OUT/logs/quant-gpu-tests.xml"
  for m in awq gptq gptq-act-order nvfp4 nvfp4-ct; do
    step "quant-make-$m" 120 $PY -m lab.data.make_tiny_quant --method "$m" --out "$QUANT/$m"
    step "quant-generate-$m" 120 $PY -m engine generate --device cuda --model "$QUANT/$m/quant" --max-new-tokens 8
  done
  for m in awq gptq-act-order nvfp4; do  # one checkpoint per dequant kernel family
    step "memcheck-quant-$m" 240 env VT_DEQUANT_KERNEL=1 VT_DEQUANT_GEMV=1 compute-sanitizer --tool memcheck \
      --error-exitcode 9 $PY -m engine generate --device cuda --model "$QUANT/$m/quant" --max-new-tokens 4
  done
  # the flip protocol's model gates for VT_DEQUANT_GEMV: the near-tie razor and the distributional gate of each
  # quantized checkpoint against transformers on its dequantized twin, with the fused GEMVs on
  for m in awq gptq-act-order nvfp4; do
    Q=(--device cuda --dtype bfloat16 --model "$QUANT/$m/quant" --oracle-model "$QUANT/$m/dense")
    step "quant-neartie-gemv-$m" 180 env VT_DEQUANT_KERNEL=1 VT_DEQUANT_GEMV=1 $PY -m lab gate neartie "${Q[@]}"
    step "quant-distributional-gemv-$m" 240 env VT_DEQUANT_KERNEL=1 VT_DEQUANT_GEMV=1 $PY -m lab gate \
      distributional "${Q[@]}"
    na_if_refused "quant-distributional-gemv-$m"
  done
  for m in awq gptq nvfp4; do  # the fused GEMV against the dequant kernel then the GEMM, on the whole step
    step "ab-step-dequant-gemv-$m" 480 env VT_DEQUANT_KERNEL=1 $PY -m lab bench ab --flag VT_DEQUANT_GEMV \
      --workload "decode-step-$m" "${L[@]}"
  done
  step ab-step-dequant-kernel-awq 480 env VT_DEQUANT_GEMV=0 $PY -m lab bench ab --flag VT_DEQUANT_KERNEL \
    --workload decode-step-awq "${L[@]}"
fi

QUANT=/tmp/tiny-qwen3-quant
QFLIP=(awq gptq-act-order nvfp4)  # one checkpoint per dequant kernel family; act-order: the sorted g_idx
if [[ " $PHASES " == *" quant-flip "* ]]; then
  L=(--ledger "$OUT/ledger")
  build_once 50
  step quant-flip-make 35 $PY -c "from lab.data.make_tiny_quant import main
for m in '${QFLIP[*]}'.split(): main(['--method', m, '--out', '$QUANT/' + m])"
  for m in "${QFLIP[@]}"; do  # batched prompts: prefill and decode at M > 1, the arm under test
    Q=(--device cuda --dtype bfloat16 --model "$QUANT/$m/quant" --oracle-model "$QUANT/$m/dense"
       --require-arm VT_DEQUANT_KERNEL)
    step "quant-flip-tokens-$m" 25 env VT_DEQUANT_KERNEL=1 $PY -m lab gate tokens "${Q[@]}"
    step "quant-flip-neartie-$m" 30 env VT_DEQUANT_KERNEL=1 $PY -m lab gate neartie "${Q[@]}"
  done
  # the fused GEMV (M = 1, default ON) does not take 32 rows: every projection dequantizes, then the GEMM
  step quant-flip-ab-awq-b32 100 $PY -m lab bench ab --flag VT_DEQUANT_KERNEL --workload decode-step-awq \
    --shape batch=32 "${L[@]}"
fi
if [[ " $PHASES " == *" quant-flip-ab "* ]]; then
  L=(--ledger "$OUT/ledger")
  build_once 60
  for m in gptq nvfp4; do
    step "quant-flip-ab-$m-b32" 120 $PY -m lab bench ab --flag VT_DEQUANT_KERNEL --workload "decode-step-$m" \
      --shape batch=32 "${L[@]}"
  done
fi

# the razor of the AWQ checkpoint with VT_DEQUANT_KERNEL off: its dequant is bitwise equal to the reference, so a
# razor verdict equal to the flag-on one (quant-flip) belongs to the M > 1 bf16 path, not to the arm
if [[ " $PHASES " == *" quant-flip-baseline "* ]]; then
  build_once 50
  step quant-flip-base-make 30 $PY -m lab.data.make_tiny_quant --method awq --out "$QUANT/awq"
  step quant-flip-base-neartie-awq 30 env VT_DEQUANT_KERNEL=0 $PY -m lab gate neartie --device cuda \
    --dtype bfloat16 --model "$QUANT/awq/quant" --oracle-model "$QUANT/awq/dense"
fi
if [[ " $PHASES " == *" peers "* ]]; then
  L=(--ledger "$OUT/ledger")  # kernels build on first use (VT_CUDA_CACHE may hold them already)
  step peers-attn 420 $PY -m lab bench bandwidth --workload attn-decode --shapes peers \
    --arms default,tiled-onepass,flashinfer-tc,flashinfer,sdpa-cudnn,sdpa-flash --plot "$OUT/attn-peers.png" \
    "${L[@]}"
  step peers-decode-b1 420 $PY -m lab bench decode --no-oracle --hf-compiled --profile "${L[@]}"
  step peers-decode-b8 420 $PY -m lab bench decode --no-oracle --hf-compiled --batch 8 --steps 32 "${L[@]}"
  step peers-decode-b32 420 $PY -m lab bench decode --no-oracle --hf-compiled --batch 32 --steps 32 "${L[@]}"
  step peers-report 60 $PY -m lab report perf --ledger "$OUT/ledger"
fi
if [[ " $PHASES " == *" teeth-gpu "* ]]; then  # the seeded bugs' catch rates on the GPU, four processes at once
  TEETH_RAZOR="${TEETH_RAZOR:-fp32-probs}"
  TEETH_SETS=("rmsnorm-round-after-weight eps-x10" "rope-fp32 window-off-by-one")
  if [[ $TEETH_RAZOR == fp32-probs ]]; then
    TEETH_SETS+=("probs-rounded" "good-linear-fp32-accumulate good-online-split")
  else
    TEETH_SETS+=("probs-fp32" "good-linear-fp32-accumulate good-attention-split-pv")
  fi
  # bash -c PY OUT RAZOR SEEDS SET...: one process per set of bugs, all waited for
  step teeth-gpu "${TEETH_LIMIT:-270}" bash -c 'pids=(); i=0; for b in "${@:5}"; do
    "$1" -m lab gate teeth --seeds "$4" --razor "$3" --device cuda --bugs $b > "$2/logs/teeth-gpu-$i.log" 2>&1 &
    pids+=($!); i=$((i + 1)); done
    rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done; exit $rc' \
    _ "$PY" "$OUT" "$TEETH_RAZOR" "${TEETH_SEEDS:-10}" "${TEETH_SETS[@]}"
fi
# FlashInfer's modules for the six peer shapes, JIT-compiled on first use: ARGV tc|decode HEAD_DIM
PERF_JIT="import sys, torch
from lab.bench.attn_peers import FlashInferDecode
tc, d = sys.argv[1] == 'tc', int(sys.argv[2])
for hq, hkv in ((32, 8), (16, 8)) if d == 128 else ((16, 2),):
    q = torch.randn(2, hq, d, dtype=torch.bfloat16, device='cuda')
    k = torch.randn(8, 32, hkv, d, dtype=torch.bfloat16, device='cuda')
    table = torch.arange(8, dtype=torch.int32, device='cuda').view(2, 4)
    lens = torch.tensor([50, 128], dtype=torch.int32, device='cuda')
    FlashInferDecode(tc, q.device)(q, k, k, table, lens, d ** -0.5, None)
torch.cuda.synchronize()
print('flashinfer ready:', sys.argv[1], 'head_dim', d)"
if [[ " $PHASES " == *" perf-jit "* ]]; then  # the engine's kernels built, FlashInfer's four modules at once
  build_once 240
  step perf-jit "${PERF_JIT_LIMIT:-200}" bash -c 'pids=(); for v in "tc 128" "decode 128" "tc 256" "decode 256"; do
    "$1" -c "$2" $v & pids+=($!); done; rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done; exit $rc' \
    _ "$PY" "$PERF_JIT"
fi
if [[ " $PHASES " == *" perf-tables "* ]]; then
  L=(--ledger "$OUT/ledger")
  step perf-attn "${PERF_ATTN_LIMIT:-110}" $PY -m lab bench bandwidth --workload attn-decode --shapes peers \
    --arms default,flashinfer-tc,flashinfer,sdpa-cudnn,sdpa-flash --reps 6 "${L[@]}"
  for b in 1 8 32; do
    step "perf-decode-b$b" "${PERF_DECODE_LIMIT:-60}" $PY -m lab bench decode --no-oracle --hf-compiled --batch "$b" \
      --steps 32 "${L[@]}"
  done
  step perf-report 60 $PY -m lab report perf --ledger "$OUT/ledger"
fi

# the arms that won their whole-step A/B (VT_GEMV_PERSISTENT lost it: A/B'd, not in the on-set; VT_GEMV_PDL, ON since
# with VT_GEMV_STREAM, is A/B'd on its own)
FUSE_ON="VT_QKV_ROPE_STORE=1 VT_NORM_GEMV=1 VT_GLU_GEMV=1"
if [[ " $PHASES " == *" fuse "* ]]; then
  L=(--ledger "$OUT/ledger")
  build_once
  step fuse-numerics 150 $PY -m lab gate kernels --filter fused/ --ledger "$OUT/ledger/fuse-numerics.json"
  # the fused ops chained under PDL, eager and replayed from a captured CUDA graph, against the default kernels
  step fuse-gpu-tests 120 $PY -m pytest tests/engine/cuda/test_gemv_prologue.py -m gpu -q -p no:cacheprovider
  step ab-fuse-qkv 60 $PY -m lab bench ab --flag VT_QKV_ROPE_STORE --workload qkv-rope-store "${L[@]}"
  step ab-fuse-norm-qkv 60 $PY -m lab bench ab --flag VT_NORM_GEMV --workload norm-gemv "${L[@]}"
  step ab-fuse-norm-gateup 60 $PY -m lab bench ab --flag VT_NORM_GEMV --workload norm-gemv --shape n=6144 "${L[@]}"
  step ab-fuse-glu 60 $PY -m lab bench ab --flag VT_GLU_GEMV --workload glu-gemv "${L[@]}"
  step ab-fuse-norm-glu 60 env VT_NORM_GEMV=1 $PY -m lab bench ab --flag VT_GLU_GEMV --workload norm-glu-gemv \
    "${L[@]}"
  step ab-fuse-pdl-o 60 $PY -m lab bench ab --flag VT_GEMV_PDL --workload gemv --shape n=1024,k=2048 "${L[@]}"
  step ab-fuse-persistent-head 60 $PY -m lab bench ab --flag VT_GEMV_PERSISTENT --workload gemv \
    --shape n=151936,k=1024 "${L[@]}"
  step ab-fuse-persistent-gateup 60 $PY -m lab bench ab --flag VT_GEMV_PERSISTENT --workload gemv \
    --shape n=6144,k=1024 "${L[@]}"
  step ab-fuse-pdl-prologue 60 env VT_NORM_GEMV=1 $PY -m lab bench ab --flag VT_GEMV_PDL --workload norm-gemv \
    "${L[@]}"
  # shellcheck disable=SC2086  # FUSE_ON is a list of NAME=VALUE words
  step fuse-tokens-b1 180 $PY -m lab bench step_arms --flags "${FUSE_ON// /,}" --steps 16
  # at batch 32 the GEMV arms (at most 8 rows) cannot run: only the q/k/v launch is required
  step fuse-tokens-b32 180 $PY -m lab bench step_arms --flags "${FUSE_ON// /,}" --batch 32 --steps 8 \
    --require VT_QKV_ROPE_STORE
  for f in ${FUSE_ON//=1/} VT_GEMV_PDL; do  # each flag alone on the whole step, against the defaults (the flip's A/B)
    step "ab-step-$f" 150 $PY -m lab bench ab --flag "$f" --workload decode-step "${L[@]}"
  done
  step fuse-decode-b1-off 150 $PY -m lab bench decode --no-oracle --steps 32 "${L[@]}"
  # shellcheck disable=SC2086
  step fuse-decode-b1-on 240 env $FUSE_ON $PY -m lab bench decode --no-oracle --steps 32 --profile "${L[@]}"
  step fuse-decode-b32-off 150 $PY -m lab bench decode --no-oracle --batch 32 --steps 16 "${L[@]}"
  # shellcheck disable=SC2086
  step fuse-decode-b32-on 150 env $FUSE_ON $PY -m lab bench decode --no-oracle --batch 32 --steps 16 "${L[@]}"
fi

# step2: the decode step outside attention, second round: the streamed GEMV (VT_GEMV_STREAM: W through shared memory
# by bulk copies, a resident grid of one block per SM), the norm kernels' early PDL trigger (VT_GEMV_PDL), on top of
# the three winning fused arms (STEP_BASE)
STEP_BASE="VT_QKV_ROPE_STORE=1 VT_NORM_GEMV=1 VT_GLU_GEMV=1"
if [[ " $PHASES " == *" step2 "* ]]; then
  L=(--ledger "$OUT/ledger")
  build_once
  step step2-numerics 120 $PY -m lab gate kernels --filter _stream/ --ledger "$OUT/ledger/step2-numerics.json"
  step step2-gpu-tests 90 $PY -m pytest tests/engine/cuda/test_gemv_stream.py -m gpu -q -p no:cacheprovider
  for nk in n=4096,k=1024 n=1024,k=2048 n=6144,k=1024 n=1024,k=3072 n=151936,k=1024; do  # Qwen3-0.6B's five
    step "ab-op-stream-${nk//[=,]/}" 40 $PY -m lab bench ab --flag VT_GEMV_STREAM --workload gemv --shape "$nk" \
      "${L[@]}"
    step "ab-op-stream-pdl-${nk//[=,]/}" 40 env VT_GEMV_PDL=1 $PY -m lab bench ab --flag VT_GEMV_STREAM \
      --workload gemv --shape "$nk" "${L[@]}"
  done
  step ab-op-stream-norm-qkv 40 env VT_NORM_GEMV=1 VT_GEMV_PDL=1 $PY -m lab bench ab --flag VT_GEMV_STREAM \
    --workload norm-gemv "${L[@]}"
  step ab-op-stream-norm-glu 40 env VT_NORM_GEMV=1 VT_GLU_GEMV=1 VT_GEMV_PDL=1 $PY -m lab bench ab \
    --flag VT_GEMV_STREAM --workload norm-glu-gemv "${L[@]}"
  # shellcheck disable=SC2086  # STEP_BASE is a list of NAME=VALUE words
  step ab-step-stream-pdl 90 env $STEP_BASE VT_GEMV_PDL=1 $PY -m lab bench ab --flag VT_GEMV_STREAM \
    --workload decode-step "${L[@]}"
  # shellcheck disable=SC2086
  step decode-base 60 env $STEP_BASE $PY -m lab bench decode --no-oracle --steps 32 "${L[@]}"
  # shellcheck disable=SC2086
  step decode-stream-pdl 90 env $STEP_BASE VT_GEMV_STREAM=1 VT_GEMV_PDL=1 $PY -m lab bench decode --no-oracle \
    --steps 32 --profile "${L[@]}"
  # shellcheck disable=SC2086
  step decode-stream 60 env $STEP_BASE VT_GEMV_STREAM=1 $PY -m lab bench decode --no-oracle --steps 32 "${L[@]}"
  # shellcheck disable=SC2086
  step decode-pdl 60 env $STEP_BASE VT_GEMV_PDL=1 $PY -m lab bench decode --no-oracle --steps 32 "${L[@]}"
  # shellcheck disable=SC2086
  step ab-step-stream 90 env $STEP_BASE $PY -m lab bench ab --flag VT_GEMV_STREAM --workload decode-step "${L[@]}"
  # shellcheck disable=SC2086
  step ab-step-pdl 90 env $STEP_BASE $PY -m lab bench ab --flag VT_GEMV_PDL --workload decode-step "${L[@]}"
fi

if [[ " $PHASES " == *" flip "* ]]; then
  # shellcheck disable=SC2206  # FLIP is a space-separated list of NAME=VALUE words
  F=(env $FLIP)
  G=(--device cuda --dtype bfloat16)
  KF=()
  for f in ${FLIP_FILTER:-}; do KF+=(--filter "$f"); done
  # every flag turned on must show an arm of its own among the arms the gates ran
  REQ=()
  for kv in $FLIP; do [[ ${kv#*=} =~ ^(1|true|on|yes)$ ]] && REQ+=(--require-arm "${kv%%=*}"); done
  # a flip of decode attention alone (every flag VT_ATTN_*) gates the models whose shapes take its arms
  FM="dense d128 moe"
  [[ -z "$(for kv in $FLIP; do [[ $kv == VT_ATTN_* ]] || echo x; done)" ]] && FM="d128 d128-g4 long"
  FM="${FLIP_MODELS:-$FM}"
  echo "flip protocol with: $FLIP (models: $FM)"
  build_once
  step flip-models 120 $PY -c "from pathlib import Path
from lab.data.gate_models import write_gate_models
from lab.data.make_tiny import build, build_moe
build_moe().save_pretrained('$MOE'); build(head_dim=128).save_pretrained('$D128')
write_gate_models(Path('$GATES'), ['d128-g4', 'long'])"
  LONG_LENS=$(long_lens)
  step flip-kernels 300 "${F[@]}" $PY -m lab gate kernels "${KF[@]}" --ledger "$OUT/ledger/flip-kernels.json"
  for m in $FM; do
    case $m in
      dense) M=() A=() ;;
      moe) M=(--model "$MOE") A=() ;;
      # 300 new tokens: a table capacity of 336 positions, so split-KV runs 2 splits and their combine; at those
      # contexts the bf16 oracle's own rounding moves margins past the band, so its fp32 twin judges again
      d128) M=(--model "$D128" --max-new-tokens 300) A=(--fp32-arbiter) ;;
      d128-g4) M=(--model "$GATES/d128-g4") A=() ;;
      long) M=(--model "$GATES/long" --prompt-lens "$LONG_LENS") A=(--fp32-arbiter) ;;
    esac
    PL=()  # FLIP_PROMPT_LENS: the razor's prompts (its 16 decode 16 rows at once, past the GEMV arms' 8)
    [[ -n ${FLIP_PROMPT_LENS:-} && $m != long ]] && PL=(--prompt-lens "$FLIP_PROMPT_LENS")
    step "flip-neartie-$m" 180 "${F[@]}" $PY -m lab gate neartie "${G[@]}" "${M[@]}" "${PL[@]}" "${A[@]}" "${REQ[@]}"
    step "flip-distributional-$m" 240 "${F[@]}" $PY -m lab gate distributional "${G[@]}" "${M[@]}"
    na_if_refused "flip-distributional-$m"
    step "flip-tokens-$m-graph" 180 "${F[@]}" $PY -m lab gate tokens "${G[@]}" "${M[@]}" "${REQ[@]}"
    step "flip-tokens-$m-eager" 180 "${F[@]}" VT_EAGER=1 $PY -m lab gate tokens "${G[@]}" "${M[@]}" "${REQ[@]}"
    if [[ $m == d128 ]]; then  # no gates run gave this model a baseline: its gates with the flags unset
      step flip-neartie-d128-noflags 180 $PY -m lab gate neartie "${G[@]}" "${M[@]}" "${A[@]}"
      step flip-tokens-d128-noflags 180 $PY -m lab gate tokens "${G[@]}" "${M[@]}"
    fi
  done
  # a flag not applicable on one model (no call of its ops there) must have run its arm on another
  for kv in $FLIP; do
    f=${kv%%=*}
    [[ ${kv#*=} =~ ^(1|true|on|yes)$ ]] || continue
    ran=0
    for m in $FM; do
      log="$OUT/logs/flip-neartie-$m.log"
      [[ -f $log ]] && ! grep -q "^n/a: $f:" "$log" && ! grep -q "^FAIL: no arm gated by $f " "$log" && ran=1
    done
    ORDER+=("flip-ran-$f")
    if [[ $ran == 1 ]]; then RESULT[flip-ran-$f]="rc=0 its arm ran on some model"
    else RESULT[flip-ran-$f]="rc=1 its arm ran on no model"; fi
  done
  # the golden of the embedded model on the GPU, rewritten only if the near-tie gate passes
  mkdir -p "$OUT/goldens"
  step flip-regen-dense 180 "${F[@]}" $PY -m lab gate regen "${G[@]}" \
    --golden "$OUT/goldens/tiny-qwen3-bfloat16-cuda.json" --ledger-dir "$OUT/ledger"
fi

if [[ " $PHASES " == *" reach "* ]]; then
  build_once
  # the long gate model's decode shape first (lab/gates/cases/attention.py long_gate_cases): the tiled arm against
  # the eager reference and both against the exact-sum reference; then the gate, with the tiled arm's split count
  # also forced to 1, 4 and 26 (reported, not judged), the oracle against itself and the fp32 twin's view
  step reach-numerics 120 $PY -m lab gate kernels --filter long-gate --ledger "$OUT/ledger/reach-long-gate.json"
  step reach 300 $PY -m lab gate reach --device cuda --dtype bfloat16 --out "$OUT/reach" --time-limit 220 \
    --tiled-splits 1 4 26
  for seed in 1 2 3; do  # more positions on `long`: the tiled arm, one split of it, and the generic arm, per prompt seed
    step "reach-long-seed$seed" 90 $PY -m lab gate reach --device cuda --dtype bfloat16 --models long \
      --arms tiled generic --seed "$seed" --tiled-splits 1 --out "$OUT/reach-seed$seed"
  done
fi

# the razor on production kernels: each model through the razor once per decode attention (lab/gates/peer_attention.py)
CALIB=/tmp/calib-models
CALIB_MODELS=(d128-g4 d128 long)  # the order of the steps and of the table
if [[ "${CALIB_RAZOR:-eager}" == fp32-probs ]]; then
  CALIB_ORACLES=(online)
  CALIB_ORACLE_ARGS=(--razor-setting fp32-probs --oracle-attn online)
else
  CALIB_ORACLES=(eager sdpa)
  CALIB_ORACLE_ARGS=(--oracle-attn eager --oracle-attn sdpa)
fi
CALIB_PEERS=(engine sdpa-cudnn flashinfer-tc flashinfer)  # a run line is logged when judged: a timeout keeps these
# FlashInfer's bf16 head_dim-128 decode, with tensor cores or not, a window or not: four modules, compiled at once
CALIB_JIT="import torch
from lab.bench.attn_peers import FlashInferDecode
def warm(tc, window):
    q = torch.randn(2, 8, 128, dtype=torch.bfloat16, device='cuda')
    k = torch.randn(8, 16, 2, 128, dtype=torch.bfloat16, device='cuda')
    table = torch.arange(8, dtype=torch.int32, device='cuda').view(2, 4)
    lens = torch.tensor([50, 64], dtype=torch.int32, device='cuda')
    FlashInferDecode(tc, q.device)(q, k, k, table, lens, 0.1, window)
    torch.cuda.synchronize()
    print('flashinfer ready:', 'tensor cores' if tc else 'decode kernel', 'window', window)"
if [[ " $PHASES " == *" calib "* ]]; then
  build_once 45
  step calib-make 25 $PY -c "from pathlib import Path
from lab.data.gate_models import write_gate_models
from lab.data.make_tiny import build
write_gate_models(Path('$CALIB'), ['d128-g4', 'long'])
build(head_dim=128).save_pretrained('$CALIB/d128')"
  # more than a minute each on the H200 (window 2); a model step that finds one unfinished resumes it (ninja keeps
  # what was built)
  step calib-jit 170 bash -c 'pids=(); for v in "True, None" "True, 40" "False, None" "False, 40"; do
    "$1" -c "$2
warm($v)" & pids+=($!); done; rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done; exit $rc' _ "$PY" "$CALIB_JIT"
  PEER_ARGS=()
  for p in "${CALIB_PEERS[@]}"; do PEER_ARGS+=(--attn-peer "$p"); done
  # each model's ids judged against the razor's eager oracle and against transformers' SDPA (fp32 scores); with
  # CALIB_RAZOR=fp32-probs, by that setting against its own online oracle (budgets and the log-prob rule)
  C=(--device cuda --dtype bfloat16 "${PEER_ARGS[@]}" "${CALIB_ORACLE_ARGS[@]}" --ledger "$OUT/ledger")
  # cuDNN's ragged path: one graph for every context length (else a new graph, hundreds of ms, per length)
  R=(env TORCH_CUDNN_SDPA_AVOID_RECOMPILE=1 $PY -m lab gate neartie)
  step calib-d128-g4 40 "${R[@]}" --model "$CALIB/d128-g4" "${C[@]}"
  step calib-d128 40 "${R[@]}" --model "$CALIB/d128" "${C[@]}"
  step calib-long 40 "${R[@]}" --model "$CALIB/long" --prompt-lens "$(long_lens)" "${C[@]}"  # not the short defaults
fi

NEXT=/tmp/tiny-qwen3-next
GDN=(env VT_GDN_KERNEL=1 VT_GDN_CHUNKED_KERNEL=1 VT_MOE_KERNELS=1)  # MoE kernels: the MoE step captures
GDN_REQ=(--require-arm VT_GDN_KERNEL --require-arm VT_GDN_CHUNKED_KERNEL)
# bf16: token-exact against transformers' generate; the near-tie razor teacher-forces the oracle through its
# chunked form, and transformers' own greedy ids fail it (test_bf16_razor_prompts_..., the row's spec)
if [[ " $PHASES " == *" qwen3next "* ]]; then
  build_once
  step qwen3next-kernels 90 $PY -m lab gate kernels --filter gdn/ --ledger "$OUT/ledger/qwen3next-kernels.json"
  step qwen3next-cuda-tests 90 $PY -m pytest tests/engine/cuda/test_gdn.py -m gpu -q -p no:cacheprovider
  step qwen3next-gpu-tests 240 $PY -m pytest tests/engine/model/test_qwen3_next_gpu.py -m gpu -q -rA -p no:cacheprovider \
    --junitxml "$OUT/logs/qwen3next-gpu-tests.xml"
fi
if [[ " $PHASES " == *" qwen3next-bf16 "* ]]; then  # the bf16 evidence alone
  build_once
  step qwen3next-gpu-razor 150 $PY -m pytest tests/engine/model/test_qwen3_next_gpu.py -m gpu -q -rA -p no:cacheprovider \
    -k razor
fi
if [[ " $PHASES " == *" qwen3next "* || " $PHASES " == *" qwen3next-bf16 "* ]]; then
  step qwen3next-make 60 $PY -c "from lab.data.make_tiny import build_next; build_next().save_pretrained('$NEXT')"
  step qwen3next-tokens-fp32 120 "${GDN[@]}" $PY -m lab gate tokens --device cuda --dtype float32 --model "$NEXT" \
    --max-new-tokens 40 "${GDN_REQ[@]}"
  step qwen3next-tokens-bf16 120 "${GDN[@]}" $PY -m lab gate tokens --device cuda --dtype bfloat16 --model "$NEXT" \
    --max-new-tokens 64 "${GDN_REQ[@]}"
fi

if [[ " $PHASES " == *" qwen3next-bench "* ]]; then
  L=(--ledger "$OUT/ledger")
  build_once
  step ab-gdn-decode-b32 60 $PY -m lab bench ab --flag VT_GDN_KERNEL "${L[@]}"
  step ab-gdn-chunked-t1024 60 $PY -m lab bench ab --flag VT_GDN_CHUNKED_KERNEL "${L[@]}"
fi

if [[ " $PHASES " == *" gdn-flip "* ]]; then
  L=(--ledger "$OUT/ledger")
  build_once 60
  step gdn-flip-kernels 20 $PY -m lab gate kernels --filter gdn/ --ledger "$OUT/ledger/gdn-flip-kernels.json"
  # token-exact against transformers (fp32, bf16; arms off and on, graphed), graphed decode equal to eager
  step gdn-flip-gpu-tests 75 $PY -m pytest tests/engine/model/test_qwen3_next_gpu.py -m gpu -q -rA -p no:cacheprovider \
    --junitxml "$OUT/logs/gdn-flip-gpu-tests.xml"
  step gdn-flip-make 25 $PY -c "from lab.data.make_tiny import build_next; build_next().save_pretrained('$NEXT')"
  step gdn-flip-tokens-fp32 30 "${GDN[@]}" $PY -m lab gate tokens --device cuda --dtype float32 --model "$NEXT" \
    --max-new-tokens 40 "${GDN_REQ[@]}"
  step gdn-flip-tokens-bf16 30 "${GDN[@]}" $PY -m lab gate tokens --device cuda --dtype bfloat16 --model "$NEXT" \
    --max-new-tokens 64 "${GDN_REQ[@]}"
  # the whole captured step, the kernel against the reference; the prefill (make) takes the chunked kernel
  step gdn-flip-ab-step-b32 80 env VT_MOE_KERNELS=1 VT_GDN_CHUNKED_KERNEL=1 $PY -m lab bench ab --flag VT_GDN_KERNEL \
    --workload decode-step-qwen3next "${L[@]}"
  step gdn-flip-ab-chunked-t1024 35 $PY -m lab bench ab --flag VT_GDN_CHUNKED_KERNEL "${L[@]}"
fi
# which arm parts the bf16 ids from transformers': the decode kernel alone, then neither (the MoE kernels stay on: the
# MoE step captures only with them)
if [[ " $PHASES " == *" gdn-flip-decode "* ]]; then
  build_once 50
  step gdn-flip-make 25 $PY -c "from lab.data.make_tiny import build_next; build_next().save_pretrained('$NEXT')"
  step gdn-flip-tokens-bf16-decode 30 env VT_GDN_KERNEL=1 VT_MOE_KERNELS=1 $PY -m lab gate tokens --device cuda \
    --dtype bfloat16 --model "$NEXT" --max-new-tokens 64 --require-arm VT_GDN_KERNEL
  step gdn-flip-tokens-bf16-refs 30 env VT_GDN_KERNEL=0 VT_GDN_CHUNKED_KERNEL=0 VT_MOE_KERNELS=1 $PY -m lab gate \
    tokens --device cuda --dtype bfloat16 --model "$NEXT" --max-new-tokens 64
fi

if [[ " $PHASES " == *" ncu "* ]]; then
  build_once
  if ! command -v ncu > /dev/null; then
    RESULT[ncu]="skip: ncu not found on PATH"
    ORDER+=(ncu)
  else
    N=(ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats
       --section WarpStateStats)
    B=($PY -m lab bench launch --calls 3)
    # -s skips the first call's kernels (module load, first launch); -c covers one whole call
    step ncu-attn-b64 240 "${N[@]}" -k regex:tiled_ -s 2 -c 2 "${B[@]}" --workload attn-decode --arm tiled
    step ncu-attn-b1-32k 240 "${N[@]}" -k regex:tiled_ -s 3 -c 3 "${B[@]}" --workload attn-decode --arm tiled \
      --shape batch=1,ctx=32768
    step ncu-attn-d256 240 "${N[@]}" -k regex:tiled_ -s 2 -c 2 "${B[@]}" --workload attn-decode --arm tiled \
      --shape hq=16,hkv=2,d=256
    step ncu-gemv 180 "${N[@]}" -k regex:gemv -s 1 -c 1 "${B[@]}" --workload gemv --arm gemv-kernel \
      --shape n=4096,k=14336
    grep -E '^  [a-z_].*\(|Duration|DRAM Throughput|Compute \(SM\) Th|Registers Per|Block Limit (Shared|Reg)|Achieved Occupancy' \
      "$OUT"/logs/ncu-*.log > "$OUT/ncu-summary.txt"
  fi
fi

if [[ " $PHASES " == *" ncu2 "* ]]; then
  NCU2_T0=$(date +%s)
  build_once
  if ! command -v ncu > /dev/null; then
    RESULT[ncu2]="skip: ncu not found on PATH"
    ORDER+=(ncu2)
  else
    NCU2_BUDGET=${NCU2_BUDGET:-270}  # seconds of build and ncu steps; the table step comes after
    # the sections that name a limiter; raw page, base units (ns, bytes); at most 8 kernels per run
    N2=(ncu --clock-control none --csv --page raw --print-units base --section SpeedOfLight --section Occupancy
        --section LaunchStats --section WarpStateStats -c 8)
    NVTX=(--nvtx --nvtx-include "profile/")  # bench launch runs its last call in that range: one call, no setup
    CALLS=2
    ncu2_step() {  # NAME LIMIT LAUNCH-ARGS...: one arm at one shape, within what is left of the budget
      local name=$1 limit=$2 left
      shift 2
      left=$(( NCU2_BUDGET - ($(date +%s) - NCU2_T0) ))
      if (( left < 20 )); then  # a run takes 8-14 s on the H200: one cut short measures nothing
        RESULT[$name]="skip: past NCU2_BUDGET=${NCU2_BUDGET}s"
        ORDER+=("$name")
        return
      fi
      (( limit > left )) && limit=$left
      STEP_TAIL=0 step "$name" "$limit" "${N2[@]}" "${NVTX[@]}" $PY -m lab bench launch --calls $CALLS "$@"
      if (( ${#NVTX[@]} )) && grep -q '^launch: ' "$OUT/logs/$name.log" \
        && ! grep -q '^"ID","Process ID"' "$OUT/logs/$name.log"; then
        # the launcher ran but ncu took nothing from its range: profile one call whole from here on
        echo "   ncu2: the NVTX range filter profiled nothing; one call per run from here on, unfiltered"
        NVTX=()
        CALLS=1
        ORDER=("${ORDER[@]:0:${#ORDER[@]}-1}")
        STEP_TAIL=0 step "$name" "$limit" "${N2[@]}" $PY -m lab bench launch --calls $CALLS "$@"
      fi
      grep -m 2 -E '==ERROR==|No kernels were profiled|^error' "$OUT/logs/$name.log" | cut -c 1-200 | sed 's/^/   /'
    }
    sname() {  # batch=64,ctx=4096,hq=32,hkv=8,d=128 -> b64-c4096-q32-kv8-d128
      local s=${1//batch=/b}
      s=${s//ctx=/c}; s=${s//hq=/q}; s=${s//hkv=/kv}; s=${s//rows=/m}; s=${s//=/}
      echo "${s//,/-}"
    }
    # (a) attention at the six peer shapes (batch 1 ctx 1024 and batch 32 ctx 1024 are the decode step's), each
    # shape's arms together so a budget cut keeps whole comparisons: ours, then FlashInfer-TC (its first run may
    # compile its kernels)
    PEER_SHAPES=(batch=64,ctx=4096,hq=32,hkv=8,d=128 batch=1,ctx=32768,hq=32,hkv=8,d=128
      batch=1,ctx=1024,hq=16,hkv=8,d=128 batch=8,ctx=2048,hq=16,hkv=8,d=128 batch=32,ctx=1024,hq=16,hkv=8,d=128
      batch=64,ctx=4096,hq=16,hkv=2,d=256)
    NCU2_PARTS=${NCU2_PARTS:-attn gemv gemm}  # which of (a), (b), (c) run
    NCU2_ATTN_ARMS=${NCU2_ATTN_ARMS:-tiled tiled-pipelined tiled-fused flashinfer-tc}
    [[ " $NCU2_PARTS " == *" attn "* ]] || PEER_SHAPES=()
    for s in "${PEER_SHAPES[@]}"; do
      for a in $NCU2_ATTN_ARMS; do
        limit=45
        [[ $a == flashinfer-tc ]] && limit=90
        ncu2_step "ncu2-$a-$(sname "$s")" "$limit" --workload attn-decode --arm "$a" --shape "$s"
      done
    done
    # (b) the decode GEMVs at batch 1: q/k/v merged and the tied head, the default kernel and the streamed arms
    GEMV_SHAPES=(n=4096,k=1024 n=151936,k=1024)
    GEMM_SHAPES=(rows=32,n=151936,k=1024 rows=32,n=6144,k=1024 rows=32,n=4096,k=1024 rows=32,n=1024,k=3072)
    [[ " $NCU2_PARTS " == *" gemv "* ]] || GEMV_SHAPES=()
    [[ " $NCU2_PARTS " == *" gemm "* ]] || GEMM_SHAPES=()
    for s in "${GEMV_SHAPES[@]}"; do
      for a in gemv-kernel gemv-stream gemv-stream-pdl; do
        ncu2_step "ncu2-$a-$(sname "$s")" 30 --workload gemv --arm "$a" --shape "$s"
      done
    done
    # (c) the batch-32 step's largest projections: the head, gate/up, q/k/v, down (cuBLAS past the GEMV's 8 rows)
    for s in "${GEMM_SHAPES[@]}"; do
      ncu2_step "ncu2-gemm-$(sname "$s")" 30 --workload gemm --arm defaults --shape "$s"
    done
    LOGS=()  # in run order, the skipped runs too: the table names each run it has no kernel of
    for n in "${ORDER[@]}"; do [[ $n == ncu2-* ]] && LOGS+=("$OUT/logs/$n.log"); done
    STEP_TAIL=0 step table-ncu2 30 $PY -m lab bench ncu_table "${LOGS[@]}" --markdown "$OUT/ncu2-table.md" \
      --ledger "$OUT/ledger" --slug ncu2-limiters --command "OUT=DIR bash ci/gpu.sh ncu2"
  fi
fi

KEEP=()
for d in ledger logs goldens; do [[ -d "$OUT/$d" ]] && KEEP+=("$d"); done
tar czf "$OUT/ledger.tgz" -C "$OUT" "${KEEP[@]}" 2>/dev/null
echo
printf '%-28s %s\n' step result
for n in "${ORDER[@]}"; do printf '%-28s %s\n' "$n" "${RESULT[$n]}"; done
if [[ " $PHASES " == *" prefill "* || " $PHASES " == *" throughput-ab "* ]]; then  # the verdicts, then the table, last
  echo
  [[ -f "$OUT/logs/prefill-numerics.log" ]] && grep -vE ' pass$|^case ' "$OUT/logs/prefill-numerics.log" | tail -n 10
  [[ -f "$OUT/logs/serve-qwen3next.log" ]] && grep -E '^(PASSED|FAILED|ERROR|SKIPPED)|stats=| (passed|failed)' \
    "$OUT/logs/serve-qwen3next.log" | tail -n 8
  sed -n '/^throughput:/,$p' "$OUT/logs/prefill-throughput.log"
fi
if [[ " $PHASES " == *" reach "* ]]; then  # the long-gate numerics, then the per-arm reach table, last
  echo
  grep -E '^(attn/|case |[0-9]+/[0-9]+ cases)' "$OUT/logs/reach-numerics.log"
  echo
  for s in 1 2 3; do  # one line per run of the extra seeds: its razor counts
    [[ -f "$OUT/reach-seed$s/reach-runs.txt" ]] && awk -v s="$s" '/^[^ ]/{n = ($1 == "long") ? $2 " " $4 : ""}
      /^  neartie: / && n != ""{sub(/^  neartie: /, ""); sub(/ over 16 prompts/, ""); print "seed " s " " n ": " $0}' \
      "$OUT/reach-seed$s/reach-runs.txt"
  done
  echo
  sed -n '/^arm  /,$p' "$OUT/logs/reach.log"
fi
if [[ " $PHASES " == *" calib "* ]]; then  # the verdicts, then the peer x model table, last
  echo
  for n in calib-make calib-jit; do  # the models written; FlashInfer's modules compiled (or the error)
    printf '%-11s %-9s %s\n' "$n" "${RESULT[$n]:-not run}" "$(tail -n 1 "$OUT/logs/$n.log" 2>/dev/null)"
  done
  echo
  if [[ "${CALIB_RAZOR:-eager}" == fp32-probs ]]; then
    echo "calib: the bf16 near-tie razor's fp32-probs setting (budgets and the log-prob rule), decode attention by each"
    echo "peer, judged against the online oracle (the setting's)"
  else
    echo "calib: the bf16 near-tie razor at its defaults (16 prompts x 64 new tokens), decode attention by each peer,"
    echo "judged against the oracle with eager attention (the razor's) and with SDPA"
  fi
  printf '%-9s %-14s %-6s %s\n' model peer oracle "verdict: positions: exact, near-tie (budget), out of band, outside top-5"
  for m in "${CALIB_MODELS[@]}"; do
    echo "calib-$m: ${RESULT[calib-$m]:-not run}"
    for p in "${CALIB_PEERS[@]}"; do
      for o in "${CALIB_ORACLES[@]}"; do
        run="$p bfloat16"
        [[ $o == eager ]] || run+=" oracle-$o"
        v=$(grep -F "run $run: " "$OUT/logs/calib-$m.log" 2>/dev/null | head -n 1 | sed -E -e "s/^run $run: //" \
          -e 's/ positions over [0-9]+ prompts//' -e 's/ \(band [0-9.]+ nats\)//')
        printf '%-9s %-14s %-6s %s\n' "$m" "$p" "$o" "${v:-no run line (logs/calib-$m.log)}"
      done
    done
  done
fi
if [[ " $PHASES " == *" qwen3next "* || " $PHASES " == *" qwen3next-bf16 "* ]]; then  # the verdicts, last
  echo
  for n in qwen3next-gpu-tests qwen3next-gpu-razor; do  # the razor-prompt test's lines: ours, and the oracle's own
    [[ -f "$OUT/logs/$n.log" ]] && grep -E "^(moe-shared-expert|d128): " "$OUT/logs/$n.log"
  done
  for n in qwen3next-kernels qwen3next-cuda-tests qwen3next-gpu-tests qwen3next-gpu-razor qwen3next-tokens-fp32 \
    qwen3next-tokens-bf16; do
    [[ -f "$OUT/logs/$n.log" ]] || continue
    v=$(grep -E '^(tokens|neartie): |cases within tolerance| (passed|failed|error)' "$OUT/logs/$n.log" | tail -n 1)
    echo "$n: ${v:-no verdict line (logs/$n.log)}"
  done
fi
if [[ " $PHASES " =~ " quant-flip"(-ab|-baseline)?" " ]]; then  # the verdicts, last
  echo
  echo "quant-flip: VT_DEQUANT_KERNEL=1, --require-arm VT_DEQUANT_KERNEL (bf16, against transformers on the dense twin)"
  QF=()
  for n in "${ORDER[@]}"; do [[ $n == quant-flip-* ]] && QF+=("$n"); done
  verdicts "${QF[@]}"
fi
if [[ " $PHASES " =~ " gdn-flip"(-decode)?" " ]]; then  # the verdicts, last
  echo
  echo "gdn-flip: VT_GDN_KERNEL=1 VT_GDN_CHUNKED_KERNEL=1 (with VT_MOE_KERNELS=1), both arms required in the token gates"
  verdicts gdn-flip-kernels gdn-flip-gpu-tests gdn-flip-make gdn-flip-tokens-fp32 gdn-flip-tokens-bf16 \
    gdn-flip-ab-step-b32 gdn-flip-ab-chunked-t1024 gdn-flip-tokens-bf16-decode gdn-flip-tokens-bf16-refs
fi
if [[ " $PHASES " == *" peers "* ]]; then  # the phase's two tables, last (the raw per-shape table, then the report)
  echo
  sed -n '/^shape (us)/,$p' "$OUT/logs/peers-attn.log"
  echo
  cat "$OUT/logs/peers-report.log"
fi
if [[ " $PHASES " == *" teeth-gpu "* ]]; then  # each process's table rows, then the verdict over all of them
  echo
  echo "teeth-gpu: --razor $TEETH_RAZOR --device cuda --seeds ${TEETH_SEEDS:-10} (${RESULT[teeth-gpu]})"
  grep -hE '^razor: ' "$OUT"/logs/teeth-gpu-0.log 2>/dev/null
  grep -hE '\((catch|pass) expected' "$OUT"/logs/teeth-gpu-[0-9].log 2>/dev/null
  bad=$(cat "$OUT"/logs/teeth-gpu-[0-9].log 2>/dev/null | grep -cE '^teeth: FAIL')
  done_=$(cat "$OUT"/logs/teeth-gpu-[0-9].log 2>/dev/null | grep -cE '^teeth: ')
  echo "teeth-gpu: $done_ of ${#TEETH_SETS[@]} processes finished, $bad failed"
fi
if [[ " $PHASES " == *" perf-tables "* ]]; then  # the report, last
  echo
  cat "$OUT/logs/perf-report.log"
fi
if [[ " $PHASES " == *" fuse "* ]]; then  # the phase's compact table, last
  echo
  echo "fuse: $FUSE_ON"
  grep -E '^[0-9]+/[0-9]+ cases' "$OUT/logs/fuse-numerics.log" | sed 's/^/numerics: /'
  tail -n 1 "$OUT/logs/fuse-gpu-tests.log" | sed 's/^/gpu-tests: /'
  for n in "${ORDER[@]}"; do
    [[ $n == ab-fuse-* || $n == ab-step-VT_* ]] && grep -E '^verdict' "$OUT/logs/$n.log" | sed "s/^/$n: /"
  done
  for b in b1 b32; do
    grep -E '^(tokens equal|arms of|step-arms:)' "$OUT/logs/fuse-tokens-$b.log" | sed "s/^/tokens-$b: /"
    for a in off on; do
      grep -E '^(engine step|fraction of floor)' "$OUT/logs/fuse-decode-$b-$a.log" | tr -s ' ' | paste -sd ';' \
        | sed "s/^/decode-$b-$a: /"
    done
  done
  grep -E 'per step' "$OUT/logs/fuse-decode-b1-on.log" | head -4 | sed 's/^/profile-b1-on: /'
fi
if [[ " $PHASES " == *" step2 "* ]]; then  # the phase's compact table, last
  echo
  echo "step2 on top of: $STEP_BASE"
  grep -E '^[0-9]+/[0-9]+ cases' "$OUT/logs/step2-numerics.log" | sed 's/^/numerics: /'
  tail -n 1 "$OUT/logs/step2-gpu-tests.log" | sed 's/^/gpu-tests: /'
  for n in "${ORDER[@]}"; do
    [[ $n == ab-* ]] && grep -E '^verdict' "$OUT/logs/$n.log" | sed "s/^/$n: /"
  done
  for n in decode-base decode-stream decode-pdl decode-stream-pdl; do
    [[ -f "$OUT/logs/$n.log" ]] || continue
    grep -E '^(engine step|fraction of floor)' "$OUT/logs/$n.log" | tr -s ' ' | paste -sd ';' | sed "s/^/$n: /"
  done
  grep -E 'per step' "$OUT/logs/decode-stream-pdl.log" | head -4 | sed 's/^/profile-stream-pdl: /'
fi
if [[ " $PHASES " == *" ncu2 "* && -f "$OUT/logs/table-ncu2.log" ]]; then  # the limiter table, last
  echo
  cat "$OUT/logs/table-ncu2.log"
fi
