"""Several `airflow` CLI commands in one Python process, one after another, each as `airflow`'s
own entry point runs it (its parser, then the command's function): a lane pays Airflow's import
(2 CPU seconds on 3.2 with bytecode, 5 without) once for the batch instead of once per
command. Run with an Airflow env's python (tests/airflow/harness.py, `AirflowHome.airflow_batch`):

    python cli_batch.py '[{"argv": ["dags", "test", "ts_inject"], "env": {}}, ...]'

Each command's `env` is set for that command only. Each command's output is framed by marker
lines; its exit code is printed in the closing one. Only for claims about what one command
does, not about separate processes (a process-wide cache, such as taskstate's store of the
process, lives on from one command to the next)."""

from __future__ import annotations

import json
import os
import sys
import traceback

MARK = "===== taskstate-cli-batch"


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        if stream is not None:
            stream.flush()


def main() -> None:
    from airflow.cli import cli_parser
    from airflow.configuration import write_default_airflow_configuration_if_needed

    write_default_airflow_configuration_if_needed()  # as `airflow` does before a command
    for n, command in enumerate(json.loads(sys.argv[1])):
        saved = {k: os.environ.get(k) for k in command["env"]}
        os.environ.update(command["env"])
        print(f"{MARK} {n} start", flush=True)
        code = 0
        try:
            args = cli_parser.get_parser().parse_args(command["argv"])
            args.func(args)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except Exception:
            traceback.print_exc()
            code = 1
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        _flush()
        print(f"{MARK} {n} end rc={code}", flush=True)


if __name__ == "__main__":
    main()
