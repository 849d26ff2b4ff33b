"""`python -m lab`: the gates and the benchmarks (gate, bench, ci)."""

from lab.cli import main

raise SystemExit(main())
