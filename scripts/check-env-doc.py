#!/usr/bin/env python3
"""rowgate check env-doc: every env var the code reads is documented or classified, and still read."""

import sys

from _rowgate import run_script

sys.exit(run_script("env-doc"))
