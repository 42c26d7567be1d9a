"""`python -m steadyserve.controller --home PATH`: the controller daemon in the foreground."""

from steadyserve.controller.daemon import main

raise SystemExit(main())
