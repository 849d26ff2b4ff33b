#!/usr/bin/env python3
"""rowgate check agent-record: the records under .agents/ are well-formed and agree."""

import sys

from _rowgate import run_script

sys.exit(run_script("agent-record"))
