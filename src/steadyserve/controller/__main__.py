from steadyserve.controller.daemon import main

raise SystemExit(main())
