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
echo "== pytest"
# Real Airflow runs in its own stage below. Here every collected test must run: a PostgreSQL or
# S3 test that skipped (its server did not start) fails the stage (scripts/junit_check.py).
out=$(mktemp -d "${TMPDIR:-/tmp}/taskstate-pytest-XXXXXX")
"$V/pytest" -m "not airflow" -q --collect-only -p no:cacheprovider "$@" >"$out/collected" || true
status=0
"$V/pytest" -m "not airflow" --junitxml="$out/junit.xml" "$@" || status=$?
"$V/python" scripts/junit_check.py pytest "$out/collected" "$out/junit.xml" || status=1
[ "$status" -eq 0 ] || exit "$status"
echo "== airflow"; bash scripts/test-airflow.sh
