#!/usr/bin/env bash
# The real-Airflow stage: tests/airflow against every pinned Airflow (scripts/airflow-env.sh),
# in two lanes side by side (a 2-core machine: each lane is one Airflow process at a time).
#   scripts/test-airflow.sh                  # 2.10 2.11 3.0 3.1 3.2, and 3.3 for coexistence
#   TASKSTATE_AIRFLOW_VERSIONS="3.2" scripts/test-airflow.sh     # narrowed, by hand only
# scripts/test.sh always runs every version; a narrowed run is for working on one version.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
versions=(${TASKSTATE_AIRFLOW_VERSIONS:-2.10 2.11 3.0 3.1 3.2 3.3})
for v in "${versions[@]}"; do bash scripts/airflow-env.sh "$v" >/dev/null; done
# Lanes balanced by each version's time (seconds on an idle 2-core machine, its deployments
# and its tests that name no version included): the longest first, each into the lane with
# less time so far. The figures are the "time by version" that junit_check --union prints at
# the end of a whole run; these from the idle run of 2026-12-01 20:16 UTC (lanes 1,151 and
# 1,171 s). Correct them from an idle run when a change moves them.
declare -A seconds=([2.10]=353 [2.11]=312 [3.0]=211 [3.1]=249 [3.2]=624 [3.3]=554)
lanes=("" "") totals=(0 0)
for v in $(for v in "${versions[@]}"; do echo "${seconds[$v]:-300} $v"; done | sort -rn | cut -d' ' -f2); do
    i=$(( totals[1] < totals[0] ? 1 : 0 ))
    lanes[$i]="${lanes[$i]:+${lanes[$i]} }$v"
    totals[$i]=$(( totals[i] + ${seconds[$v]:-300} ))
done
logs=${TASKSTATE_AIRFLOW_LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/taskstate-airflow-XXXXXX")}
pids=()
start=$SECONDS
for i in 0 1; do
    [ -n "${lanes[$i]}" ] || continue
    echo "== airflow lane $i: ${lanes[$i]} (~${totals[$i]} s idle; log: $logs/lane$i.log)"
    TASKSTATE_AIRFLOW_VERSIONS="${lanes[$i]}" .venv/bin/pytest tests/airflow -m airflow \
        -p no:cacheprovider -q --collect-only "$@" >"$logs/lane$i.collected" 2>&1 || true
    ( lane_start=$SECONDS
      TASKSTATE_AIRFLOW_VERSIONS="${lanes[$i]}" .venv/bin/pytest tests/airflow -m airflow \
          -p no:cacheprovider -q --durations=15 --junitxml="$logs/lane$i.xml" "$@" \
          >"$logs/lane$i.log" 2>&1 || lane_status=$?
      echo "== airflow lane $i: $(( SECONDS - lane_start )) s" >>"$logs/lane$i.log"
      exit "${lane_status:-0}" ) &
    pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
pairs=()
for i in 0 1; do
    [ -n "${lanes[$i]}" ] || continue
    tail -n 45 "$logs/lane$i.log"
    # A test that crashes its lane, or skips though its version is in the lane, fails the stage
    # (scripts/junit_check.py), not just a failed test.
    .venv/bin/python scripts/junit_check.py "airflow lane $i (${lanes[$i]})" \
        "$logs/lane$i.collected" "$logs/lane$i.xml" --versions "${lanes[$i]}" || status=1
    pairs+=("$logs/lane$i.collected" "$logs/lane$i.xml")
done
# Each test function passed in some lane: no deployment test is left to "the other lane". A
# narrowed run leaves the other versions' tests out on purpose, so only the full run checks.
if [ -z "${TASKSTATE_AIRFLOW_VERSIONS:-}" ]; then
    .venv/bin/python scripts/junit_check.py --union "airflow (${versions[*]})" "${pairs[@]}" \
        || status=1
else
    echo "== airflow: narrowed to ${versions[*]}: no check that every test function passed"
fi
echo "== airflow: $(( SECONDS - start )) s (load $(cut -d' ' -f1-3 /proc/loadavg))"
exit "$status"
