"""The kernel table (engine/kernels/table.py), re-exported as one module: `from engine import kernels`."""

from engine.kernels.table import *  # noqa: F403
from engine.kernels.table import NOTICED, decode_row_lens  # noqa: F401
