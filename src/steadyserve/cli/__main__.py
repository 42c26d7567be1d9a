"""`python -m steadyserve.cli`: the `steady` command without its entry-point script."""

from steadyserve.cli.main import main

main()
