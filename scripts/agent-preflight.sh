#!/usr/bin/env bash
# Runs every rowgate gate over this repository in one process: one line per gate, then one verdict.
# Extra arguments go to `rowgate preflight` (e.g. --format json, --only ID, --fail-on-skip).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${ROWGATE_PYTHON:-}"
if [ -z "$py" ]; then
  if [ -x "$root/.venv/bin/python" ]; then py="$root/.venv/bin/python"; else py="$(command -v python3)"; fi
fi
cd "$root"
exec env PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" "$py" -m checkers preflight "$@"
