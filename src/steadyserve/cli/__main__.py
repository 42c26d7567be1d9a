from steadyserve.cli.main import main

main()
