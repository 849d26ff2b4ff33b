#!/usr/bin/env bash
# Creates ./.venv with rowgate and everything its tests need (CPU torch 2.13.0, transformers, pytest).
# Idempotent: re-installs only when pyproject.toml changed since the last run.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py="${PYTHON:-python3}"
stamp=".venv/.rowgate-setup"
want="$(sha256sum pyproject.toml | cut -c1-16)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "setup: creating .venv with $($py --version 2>&1)" >&2
"$py" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip >&2
# The CPU wheel first and pinned: an unpinned torch pulls a multi-GB CUDA build.
.venv/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0" >&2
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[engine,oracle,dev]" >&2
echo "$want" > "$stamp"
echo "setup: done (.venv)" >&2
