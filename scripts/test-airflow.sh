#!/usr/bin/env bash
# The real-Airflow stage: tests/airflow against every pinned Airflow (scripts/airflow-env.sh),
# in two lanes side by side (a 2-core machine: each lane is one Airflow process at a time).
#   scripts/test-airflow.sh                  # 2.10 2.11 3.0 3.1 3.2, and 3.3 for coexistence
#   TASKSTATE_AIRFLOW_VERSIONS="3.2" scripts/test-airflow.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
versions=(${TASKSTATE_AIRFLOW_VERSIONS:-2.10 3.0 3.3 2.11 3.1 3.2})
for v in "${versions[@]}"; do bash scripts/airflow-env.sh "$v" >/dev/null; done
half=$(( (${#versions[@]} + 1) / 2 ))
lanes=("${versions[*]:0:half}" "${versions[*]:half}")
logs=$(mktemp -d "${TMPDIR:-/tmp}/taskstate-airflow-XXXXXX")
pids=()
for i in 0 1; do
    [ -n "${lanes[$i]}" ] || continue
    echo "== airflow lane $i: ${lanes[$i]} (log: $logs/lane$i.log)"
    # What the lane should run: a test that crashes its lane or skips for a reason other than
    # "version not selected" fails the stage (scripts/junit_check.py), not just a failed test.
    TASKSTATE_AIRFLOW_VERSIONS="${lanes[$i]}" .venv/bin/pytest tests/airflow -m airflow \
        -p no:cacheprovider -q --collect-only "$@" >"$logs/lane$i.collected" 2>&1 || true
    TASKSTATE_AIRFLOW_VERSIONS="${lanes[$i]}" .venv/bin/pytest tests/airflow -m airflow \
        -p no:cacheprovider -q --junitxml="$logs/lane$i.xml" "$@" >"$logs/lane$i.log" 2>&1 &
    pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
for i in 0 1; do
    [ -n "${lanes[$i]}" ] || continue
    tail -n 25 "$logs/lane$i.log"
    .venv/bin/python scripts/junit_check.py "airflow lane $i (${lanes[$i]})" \
        "$logs/lane$i.collected" "$logs/lane$i.xml" --versions "${lanes[$i]}" \
        --allow-skip 'not selected' --allow-skip '(no|neither) Airflow .*selected' || status=1
done
exit "$status"
