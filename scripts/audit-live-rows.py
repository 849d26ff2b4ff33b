#!/usr/bin/env python3
"""rowgate check live-rows: active rows have live claims. `--check` gates; without it, print the table."""

import sys

from _rowgate import run_script

if "--check" not in sys.argv[1:] and not {"-h", "--help"} & set(sys.argv[1:]):
    sys.argv.insert(1, "--report")  # the conventional script reports unless asked to gate
sys.exit(run_script("live-rows"))
