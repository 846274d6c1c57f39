#!/usr/bin/env bash
# The main job, for real: Airflow 3.2 (pinned env, SQLite metadata DB, the embedded taskstate
# store) runs examples/dags/etl_with_checkpoint.py under its scheduler and LocalExecutor; try 1
# is SIGKILLed part-way and the retry resumes from its checkpoint, every record exactly once;
# then the taskstate CLI prints the state. A few minutes on 2 cores (the first run also builds
# the Airflow env). The same job without Airflow: .venv/bin/python examples/plain/run_demo.py
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/python examples/airflow/demo.py
