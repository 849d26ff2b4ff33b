#!/usr/bin/env python3
"""rowgate check doc-checkpoint: rendered documents match the records, and range commits keep them current."""

import sys

from _rowgate import run_script

sys.exit(run_script("doc-checkpoint"))
