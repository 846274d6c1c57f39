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
    TASKSTATE_AIRFLOW_VERSIONS="${lanes[$i]}" .venv/bin/pytest tests/airflow -m airflow \
        -p no:cacheprovider -q "$@" >"$logs/lane$i.log" 2>&1 &
    pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
passed=0 failed=0
for log in "$logs"/lane*.log; do
    tail -n 25 "$log"
    read -r p f < <(tail -n 1 "$log" | awk '{for (i = 1; i < NF; i++) {
        if ($(i + 1) ~ /^passed/) p += $i; if ($(i + 1) ~ /^(failed|errors?)/) f += $i }}
        END {print p + 0, f + 0}')
    passed=$((passed + p)) failed=$((failed + f))
done
echo "airflow: $passed passed, $failed failed"
exit "$status"
