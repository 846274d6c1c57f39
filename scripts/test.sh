#!/usr/bin/env bash
# The whole test suite, from a fresh clone: bootstrap, static checks, then every test stage.
# Each stage builds and starts what it needs (PostgreSQL on loopback, pinned Airflow envs).
# Every Airflow version runs, whatever TASKSTATE_AIRFLOW_VERSIONS says: a green run of this
# script is the README's claim. To work on one version, run scripts/test-airflow.sh directly.
# The Airflow stage (scripts/test-airflow.sh, two lanes) runs in the background from the start,
# and the static checks and the unit stage beside it: they use what the lanes leave of the CPU
# while they wait (on servers starting, schedulers, task processes) instead of running before
# them (docs/testing.md: what that saves). Every stage runs to its end and the run fails if any
# failed; the arguments go to the unit stage's pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
T0=$SECONDS
status=0
stage_start=$SECONDS stage_name=""
stage() {  # each stage's wall time, and the load it ran under (the machine may be shared)
    [ -z "$stage_name" ] || echo "== $stage_name: $(( SECONDS - stage_start )) s (load $(cut -d' ' -f1-3 /proc/loadavg))"
    stage_name=$1 stage_start=$SECONDS
    [ -z "$1" ] || echo "== $1"
}
stage bootstrap; bash scripts/bootstrap.sh
V=.venv/bin
out=$(mktemp -d "${TMPDIR:-/tmp}/taskstate-tests-XXXXXX")
mkdir "$out/airflow"
echo "== airflow: started, beside the stages below (log: $out/airflow.log)"
( airflow_start=$SECONDS airflow_status=0
  env -u TASKSTATE_AIRFLOW_VERSIONS TASKSTATE_AIRFLOW_LOGS="$out/airflow" \
      bash scripts/test-airflow.sh || airflow_status=$?
  echo "== airflow: $(( SECONDS - airflow_start )) s in all"
  exit "$airflow_status" ) >"$out/airflow.log" 2>&1 &
airflow_pid=$!
stage ruff
"$V/ruff" check src tests bench examples || status=1
"$V/ruff" format --check src tests bench examples || status=1
stage mypy; "$V/mypy" || status=1
# the layers in pyproject.toml [tool.importlinter] (docs/architecture.md); under a second
stage layers; "$V/lint-imports" --no-cache --no-logo || status=1
# ~20 s from PyPI, every file pinned by sha256; a failed fetch fails the run (its tests need it)
stage "lint corpus"; bash scripts/fetch_lint_corpus.sh || status=1
stage pytest
# Real Airflow runs in the stage beside this one. Here every collected test must run: a
# PostgreSQL or S3 test that skipped (its server did not start) fails the stage
# (scripts/junit_check.py).
"$V/pytest" -m "not airflow" -q --collect-only -p no:cacheprovider "$@" >"$out/collected" || true
"$V/pytest" -m "not airflow" --junitxml="$out/junit.xml" "$@" || status=1
"$V/python" scripts/junit_check.py pytest "$out/collected" "$out/junit.xml" || status=1
stage "airflow (the rest of it)"
wait "$airflow_pid" || status=1
stage ""
cat "$out/airflow.log"
echo "== total: $(( SECONDS - T0 )) s"
# what each issue's tests cost the wall time, against its budget (docs/testing.md)
"$V/python" scripts/suite_time.py --total $(( SECONDS - T0 )) "$out/junit.xml" \
    "$out"/airflow/lane*.xml || true
exit "$status"
