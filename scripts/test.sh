#!/usr/bin/env bash
# The whole test suite: set up; lint, format and type checks (ruff check, ruff format --check, mypy strict
# for checkers/ and the looser config for engine/, both in pyproject.toml); pytest over tests/ (GPU tests
# skip here with their reason); and compile every CUDA source for every arch in the feature table and
# audit the objects (gencode).
#
# The fat build runs beside the checks and tests, niced, on the cores pytest leaves idle; its log is printed
# after pytest, and either failing fails the script. It writes only build/cuda-fat, and pytest reads it: the
# suite's sm_90 warnings-as-errors compile checks take the fat build's object of each source (named by the
# hash of the source as it is now, the flags and nvcc; it holds sm_90 SASS) instead of running nvcc again.
# FAT_BUILD_DIR and FAT_BUILD_PID (exported below) tell pytest where and while which process; those tests
# run last and wait for their object while the build runs (FAT_BUILD_WAIT_S, default 1800 s); a source the
# fat build wrote no object for (it failed there) is compiled by its test, which fails with nvcc's message
# (tests/engine/cuda/nvcc_strict.py).
#
# Progress: a line at least every 30 s while anything runs ("[test.sh] 95 s: pytest; fat build: [4/11] ...",
# the fat build's last per-source line), and once pytest is done, the fat build's log streamed with a
# "[fat build]" prefix while the script waits for it. Target: 20 minutes on 2 cores (CI).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
fat_pid=""
fat_log="build/fat-build.log"
heartbeat() { # every 30 s: the time, the phase, and the fat build's latest line while it runs
  local fat=""
  while sleep 30; do
    fat=""
    if [ -n "$fat_pid" ] && [ -s "$fat_log" ]; then fat="; fat build: $(tail -n 1 "$fat_log" | cut -c1-160)"; fi
    printf '\n[test.sh] %d s: %s%s\n' "$SECONDS" "$(cat build/.test-phase 2>/dev/null || echo running)" "$fat" >&2
  done
}
mark() { mkdir -p build && echo "$1" >build/.test-phase; }
mark "setup"
heartbeat &
beat_pid=$!
trap 'kill "$beat_pid" 2>/dev/null; [ -n "$fat_pid" ] && kill -- "-$fat_pid" 2>/dev/null; true' EXIT
bash scripts/setup.sh
if ! command -v nvcc >/dev/null 2>&1; then
  echo "SKIP fat build and gencode audit: nvcc is not installed on this machine"
else
  mkdir -p build
  set -m # its own process group, so that a failing check or test stops the whole build (nvcc included)
  nice -n 10 env PYTHON=.venv/bin/python bash ci/fat-build.sh build/cuda-fat >"$fat_log" 2>&1 &
  fat_pid=$!
  set +m
  export FAT_BUILD_DIR="$root/build/cuda-fat" FAT_BUILD_PID="$fat_pid"
  kill "$beat_pid" 2>/dev/null || true # restart it: the subshell sees fat_pid only from here on
  heartbeat &
  beat_pid=$!
  echo "fat build and gencode audit: started beside the tests (log: $fat_log; its latest line every 30 s)"
fi
mark "lint and types (ruff, mypy)"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy checkers
.venv/bin/mypy engine
.venv/bin/mypy lab
mark "pytest"
.venv/bin/python -m pytest "$@"
if [ -n "$fat_pid" ]; then
  mark "waiting for the fat build"
  echo "pytest done; the fat build so far, then as it goes:"
  tail -n +1 -F --pid="$fat_pid" "$fat_log" 2>/dev/null | sed -u 's/^/[fat build] /' || true
  rc=0
  wait "$fat_pid" || rc=$?
  fat_pid=""
  if [ "$rc" -ne 0 ]; then
    echo "fat build or gencode audit failed (exit $rc)" >&2
    exit "$rc"
  fi
fi
mark "done"
echo "[test.sh] all done in $SECONDS s"
