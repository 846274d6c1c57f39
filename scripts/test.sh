#!/usr/bin/env bash
# The whole test suite, from a fresh clone: bootstrap, static checks, then every test stage.
# Each stage builds and starts what it needs (PostgreSQL on loopback, pinned Airflow envs).
# Every Airflow version runs, whatever TASKSTATE_AIRFLOW_VERSIONS says: a green run of this
# script is the README's claim. To work on one version, run scripts/test-airflow.sh directly.
set -euo pipefail
cd "$(dirname "$0")/.."
T0=$SECONDS
stage_start=$SECONDS stage_name=""
stage() {  # each stage's wall time, and the load it ran under (the machine may be shared)
    [ -z "$stage_name" ] || echo "== $stage_name: $(( SECONDS - stage_start )) s (load $(cut -d' ' -f1-3 /proc/loadavg))"
    stage_name=$1 stage_start=$SECONDS
    [ -z "$1" ] || echo "== $1"
}
stage bootstrap; bash scripts/bootstrap.sh
V=.venv/bin
stage ruff; "$V/ruff" check src tests bench examples; "$V/ruff" format --check src tests bench examples
stage mypy; "$V/mypy"
# the layers in pyproject.toml [tool.importlinter] (docs/architecture.md); under a second
stage layers; "$V/lint-imports" --no-cache --no-logo
# ~20 s from PyPI, every file pinned by sha256; a failed fetch fails the run (its tests need it)
stage "lint corpus"; bash scripts/fetch_lint_corpus.sh
stage pytest
# Real Airflow runs in its own stage below. Here every collected test must run: a PostgreSQL or
# S3 test that skipped (its server did not start) fails the stage (scripts/junit_check.py).
out=$(mktemp -d "${TMPDIR:-/tmp}/taskstate-pytest-XXXXXX")
"$V/pytest" -m "not airflow" -q --collect-only -p no:cacheprovider "$@" >"$out/collected" || true
status=0
"$V/pytest" -m "not airflow" --junitxml="$out/junit.xml" "$@" || status=$?
"$V/python" scripts/junit_check.py pytest "$out/collected" "$out/junit.xml" || status=1
[ "$status" -eq 0 ] || exit "$status"
stage airflow; env -u TASKSTATE_AIRFLOW_VERSIONS bash scripts/test-airflow.sh
stage ""
echo "== total: $(( SECONDS - T0 )) s"
