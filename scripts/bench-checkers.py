#!/usr/bin/env python3
"""Checker benchmarks: `scripts/bench-checkers.py NAME [options]` runs scripts/bench/NAME.py.

Each benchmark builds its own temporary repository, measures rowgate against a floor (the git or file
reads it cannot avoid) in the same run, and prints ratios, not bare times.
"""

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _rowgate  # noqa: E402,F401  (puts the checkout on sys.path; re-runs under .venv when deps are missing)


def main(argv: list[str]) -> int:
    names = sorted(p.stem.replace("_", "-") for p in (HERE / "bench").glob("*.py") if not p.stem.startswith("_"))
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip() + "\n\nbenchmarks: " + (", ".join(names) or "(none)"))
        return 0 if argv else 2
    if argv[0] not in names:
        print(f"bench-checkers: unknown benchmark {argv[0]!r}; known: {', '.join(names)}", file=sys.stderr)
        return 2
    path = HERE / "bench" / f"{argv[0].replace('-', '_')}.py"
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
