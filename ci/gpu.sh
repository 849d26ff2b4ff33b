#!/usr/bin/env bash
# The GPU job is lab/ci.py's phase table (gates bench serve reach flip ncu calib); this shim keeps the old entry
# point: `OUT=DIR bash ci/gpu.sh [PHASE ...]` is `python -m lab ci [PHASE ...]` (FLIP, FLIP_MODELS, FLIP_FILTER and
# FLIP_PROMPT_LENS are read from the environment as before). docs/CI.md lists the phases that left with the bash.
cd "$(dirname "$0")/.." || exit 2
exec "${PYTHON:-python3}" -m lab ci "$@"
