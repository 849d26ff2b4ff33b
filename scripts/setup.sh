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
# torch first and pinned: an unpinned torch pulls a multi-GB CUDA build. Without a GPU, the CPU wheel: the
# one pip finds (a local wheel or index, as on this project's machines), else PyTorch's CPU index.
torch_pin="torch==2.13.0"
cpu_index="https://download.pytorch.org/whl/cpu"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "setup: a GPU is present: $torch_pin from the default index" >&2
  .venv/bin/python -m pip install -q --disable-pip-version-check "$torch_pin" >&2
else
  report="$(mktemp)"
  # resolve without installing (metadata only): which build of the pin would pip take?
  found="$(.venv/bin/python -m pip install -q --disable-pip-version-check --dry-run --no-deps --ignore-installed \
             --report "$report" "$torch_pin" >/dev/null 2>&1 && .venv/bin/python -c 'import json, sys
item = json.load(open(sys.argv[1]))["install"][0]
print(item["metadata"]["version"], item["download_info"]["url"])' "$report" || true)"
  rm -f "$report"
  version="${found%% *}"; url="${found#* }"
  if [ -n "$found" ] && { [[ "$version" == *+cpu ]] || [[ "$url" == file:* ]]; }; then
    echo "setup: no GPU: torch $version from $url" >&2
    .venv/bin/python -m pip install -q --disable-pip-version-check "$torch_pin" >&2
  else
    echo "setup: no GPU and no local CPU wheel of $torch_pin: installing it from PyTorch's CPU index $cpu_index" >&2
    .venv/bin/python -m pip install -q --disable-pip-version-check --index-url "$cpu_index" "$torch_pin" >&2
  fi
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[engine,oracle,dev]" >&2
echo "$want" > "$stamp"
echo "setup: done (.venv)" >&2
