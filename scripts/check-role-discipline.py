#!/usr/bin/env python3
"""rowgate check role-discipline: changes reach main through a row."""

import sys

from _rowgate import run_script

sys.exit(run_script("role-discipline"))
