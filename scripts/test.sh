#!/usr/bin/env bash
# The whole test suite, from a fresh clone: bootstrap, static checks, then every test stage.
# Each stage builds and starts what it needs (PostgreSQL on loopback, pinned Airflow envs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
V=.venv/bin
echo "== ruff"; "$V/ruff" check src tests bench examples; "$V/ruff" format --check src tests bench examples
echo "== mypy"; "$V/mypy"
# ~20 s from PyPI, every file pinned by sha256; a failed fetch fails the run (its tests need it)
echo "== lint corpus"; bash scripts/fetch_lint_corpus.sh
echo "== pytest"; "$V/pytest" "$@"
echo "== airflow"; bash scripts/test-airflow.sh
