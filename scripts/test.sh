#!/usr/bin/env bash
# The whole test suite: set up; lint, format and type checks (ruff check, ruff format --check, mypy strict
# for checkers/ and the looser config for engine/, both in pyproject.toml); pytest over tests/ (GPU tests
# skip here with their reason); and compile every CUDA source for every arch in the feature table and
# audit the objects (gencode).
#
# The fat build shares no state with the checks and tests (it writes only build/cuda-fat, which no test
# reads, and reads the sources), so it runs beside them, niced, on the cores pytest leaves idle; its log is
# printed after pytest, and either failing fails the script.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
fat_pid=""
fat_log="build/fat-build.log"
if ! command -v nvcc >/dev/null 2>&1; then
  echo "SKIP fat build and gencode audit: nvcc is not installed on this machine"
else
  mkdir -p build
  set -m # its own process group, so that a failing check or test stops the whole build (nvcc included)
  nice -n 10 env PYTHON=.venv/bin/python bash ci/fat-build.sh build/cuda-fat >"$fat_log" 2>&1 &
  fat_pid=$!
  set +m
  trap '[ -n "$fat_pid" ] && kill -- "-$fat_pid" 2>/dev/null; true' EXIT
  echo "fat build and gencode audit: started beside the tests (log: $fat_log)"
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy checkers
.venv/bin/mypy engine
.venv/bin/python -m pytest "$@"
if [ -n "$fat_pid" ]; then
  rc=0
  wait "$fat_pid" || rc=$?
  fat_pid=""
  cat "$fat_log"
  if [ "$rc" -ne 0 ]; then
    echo "fat build or gencode audit failed (exit $rc)" >&2
    exit "$rc"
  fi
fi
