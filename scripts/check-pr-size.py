#!/usr/bin/env python3
"""rowgate check pr-size: every changed path fits a path class within its review budget."""

import sys

from _rowgate import run_script

sys.exit(run_script("pr-size"))
