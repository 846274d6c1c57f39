#!/usr/bin/env bash
# The main job on the embedded default (SQLite, no server): a task killed part-way resumes
# from its checkpoint on the retry.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/python examples/plain/run_demo.py
