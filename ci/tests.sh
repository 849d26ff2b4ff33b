#!/usr/bin/env bash
# CI job: the whole test suite on a CPU machine (the README's test command).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec bash scripts/test.sh -q
