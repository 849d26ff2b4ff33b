"""`python -m checkers` is the `rowgate` console script."""

import sys

from .cli import main

sys.exit(main())
