"""Shared bootstrap of the conventional check scripts: run a check from a checkout without installing it."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

try:
    from checkers.cli import run_script
except ModuleNotFoundError as exc:
    venv = ROOT / ".venv" / "bin" / "python"
    if venv.exists() and Path(sys.executable) != venv and not os.environ.get("ROWGATE_REEXEC"):
        # The checkout's own environment has the dependencies: use it.
        os.environ["ROWGATE_REEXEC"] = "1"
        os.execv(str(venv), [str(venv), *sys.argv])
    sys.exit(f"rowgate: missing dependency {exc.name!r}; run `bash scripts/setup.sh` or `pip install .` first")

__all__ = ["run_script"]
