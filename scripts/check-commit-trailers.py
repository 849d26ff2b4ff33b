#!/usr/bin/env python3
"""rowgate check commit-trailers: every commit in a range (--range A..B), or one message
(--message-file F), carries the trailer contract configured in .agents/config.yaml."""

import sys

from _rowgate import run_script

sys.exit(run_script("commit-trailers"))
