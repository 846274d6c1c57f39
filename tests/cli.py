"""The `taskstate` command run in the test's own process, answering as `subprocess.run` would.

A `python -m taskstate` costs a third of a CPU second before it does anything (interpreter start
and imports), on a machine whose two cores the Airflow lanes want too. Click's runner gives the
same exit code, stdout and stderr apart; what only a real process shows (a closed pipe, the
terminal's width, no traceback from the interpreter's exit) stays a real `subprocess.run`.
"""

from __future__ import annotations

import os
import subprocess
import traceback
from collections.abc import Mapping

from click.testing import CliRunner

from taskstate.cli import main


def invoke(
    *args: str, env: Mapping[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`taskstate ARGS`; `env`, as for `subprocess.run`, is the whole environment the command
    sees (None: this process's). An exception other than an exit fails the test: a process would
    have printed it as a traceback."""
    overlay: dict[str, str | None] | None = None
    if env is not None:
        overlay = {name: None for name in os.environ if name not in env}
        overlay.update(env)
    result = CliRunner().invoke(main, list(args), input=stdin, env=overlay)
    crashed = result.exception is not None and not isinstance(result.exception, SystemExit)
    assert not crashed, "".join(traceback.format_exception(*result.exc_info))  # type: ignore[misc]
    return subprocess.CompletedProcess(
        ["taskstate", *args], result.exit_code, result.stdout, result.stderr
    )
