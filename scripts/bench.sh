#!/usr/bin/env bash
# Side-by-side benchmark vs Airflow 3.3.2's native state store (issue 5); see bench/README.md.
#   bash scripts/bench.sh [--smoke] [--only per_op,etl,...] [--sides A,B-3.2,...] [--runs N]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
PYTHONPATH=bench exec .venv/bin/python -m versus "$@"
