"""``python -m steadyserve.sim run|replay|self-check``: see sim/cli.py."""

from steadyserve.sim.cli import main

raise SystemExit(main())
