#!/usr/bin/env python3
"""rowgate check gencode: the archs compiled into each CUDA object equal the feature table's."""

import sys

from _rowgate import run_script

sys.exit(run_script("gencode"))
