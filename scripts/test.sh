#!/usr/bin/env bash
# The whole test suite: set up, then pytest over tests/ (GPU tests skip here with their reason).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
