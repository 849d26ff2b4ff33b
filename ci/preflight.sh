#!/usr/bin/env bash
# CI job: every gate over this repository, failing on skips, with GitHub annotations when run there.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
fmt=text
if [ -n "${GITHUB_ACTIONS:-}" ]; then fmt=github; fi
exec .venv/bin/rowgate preflight --fail-on-skip --format "$fmt" "$@"
