#!/usr/bin/env python3
"""rowgate check evidence: cited numbers are in their ledger records; headlines stand on clean, current records."""

import sys

from _rowgate import run_script

sys.exit(run_script("evidence"))
