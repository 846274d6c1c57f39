"""`python -m taskstate`: runs the `taskstate` command line."""

from taskstate.cli import main

main()
