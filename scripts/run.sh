#!/usr/bin/env bash
# The main job: set up, run every gate over this repository's own records (a gate whose inputs are built
# elsewhere, as gencode's CUDA build, is listed as not run with its reason and does not turn the verdict),
# then generate text with the engine's embedded tiny model: a toy with random weights, so the text is not
# language; the line per prompt gives the token ids, the decoded text and why generation stopped.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
.venv/bin/rowgate preflight "$@"
if [ -d engine/data ]; then
  .venv/bin/python -m engine generate --prompt "Once upon a time" --max-new-tokens 16
fi
