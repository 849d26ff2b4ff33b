"""`python -m checkers` is the `rowgate` console script."""

import sys

from checkers.cli import main

sys.exit(main())
