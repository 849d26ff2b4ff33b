#!/usr/bin/env bash
# CI job: every gate over this repository, failing on skips, with GitHub annotations when run there. A gate
# whose inputs another job makes (gencode audits the CUDA build of the fat-build job) is listed as not run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
fmt=text
if [ -n "${GITHUB_ACTIONS:-}" ]; then
  fmt=github
  # The base CI judges: the last green commit (the file the workflow restores), else the push's `before`,
  # else the merge base with the pull request's target or the default branch; never older than ci.floor.
  # `rowgate ci base` prints it and says on stderr which rule chose it.
  green=()
  if [ -f "${ROWGATE_GREEN_FILE:-}" ]; then green=(--green-file "$ROWGATE_GREEN_FILE"); fi
  ROWGATE_BASE="$(.venv/bin/rowgate ci base "${green[@]}")"
  export ROWGATE_BASE
fi
exec .venv/bin/rowgate preflight --fail-on-skip --format "$fmt" "$@"
