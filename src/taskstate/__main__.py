from taskstate.cli import main

main()
