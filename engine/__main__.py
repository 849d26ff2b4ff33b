"""`python -m engine`: the engine's command line (generate); the gates and benchmarks are `python -m lab`."""

from engine.cli import main

raise SystemExit(main())
