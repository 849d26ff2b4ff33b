#!/usr/bin/env python3
"""rowgate check pr-body: a PR body carries the trailer contract and its issue references hold."""

import sys

from _rowgate import run_script

sys.exit(run_script("pr-body"))
