#!/usr/bin/env python3
"""rowgate check gemv-invocation: the engine's matmul/GEMV call sites keep the caller's dtype and named tuning constants."""

import sys

from _rowgate import run_script

sys.exit(run_script("gemv-invocation"))
