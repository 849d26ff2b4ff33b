#!/usr/bin/env bash
# CI job: every gate over this repository, failing on skips, with GitHub annotations when run there. A gate
# whose inputs another job makes (gencode audits the CUDA build of the fat-build job) is listed as not run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
fmt=text
# On a pull request the base is the target branch as fetched, not a local main the runner lacks.
if [ -n "${GITHUB_BASE_REF:-}" ]; then export ROWGATE_BASE="origin/${GITHUB_BASE_REF}"; fi
if [ -n "${GITHUB_ACTIONS:-}" ]; then fmt=github; fi
exec .venv/bin/rowgate preflight --fail-on-skip --format "$fmt" "$@"
