"""`python -m engine`: the engine's command line (generate, gate, bench)."""

from engine.cli import main

raise SystemExit(main())
