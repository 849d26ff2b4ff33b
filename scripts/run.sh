#!/usr/bin/env bash
# The main job: set up, run every gate over this repository's own records, then generate tokens with the
# engine's embedded tiny model.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
.venv/bin/rowgate preflight "$@"
if [ -d engine/data ]; then
  .venv/bin/python -m engine generate --prompt-ids 1,2,3 --max-new-tokens 16
fi
