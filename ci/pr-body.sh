#!/usr/bin/env bash
# CI job (pull requests): the PR body carries the trailer contract and its issue references hold; the body
# comes from the event ($GITHUB_EVENT_PATH), or from a file given as the first argument.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
fmt=text
if [ -n "${GITHUB_ACTIONS:-}" ]; then fmt=github; fi
args=()
if [ $# -gt 0 ]; then args=(--message-file "$1"); fi
exec .venv/bin/rowgate check pr-body --format "$fmt" "${args[@]}"
