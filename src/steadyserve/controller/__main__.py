"""`python -m steadyserve.controller --home PATH`: the controller daemon in the foreground
(what `steady controller run` runs; the CLI starts it with --on-demand)."""

from steadyserve.controller.entry import main

raise SystemExit(main())
