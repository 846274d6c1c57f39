"""`python -m taskstate.lint`: the same command as `taskstate lint`."""

from taskstate.lint.command import lint

lint(prog_name="taskstate lint")
