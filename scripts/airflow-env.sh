#!/usr/bin/env bash
# Build (or reuse) a pinned virtualenv for one Airflow version and print its path.
#
#   scripts/airflow-env.sh 3.2            # -> /root/.cache/taskstate/envs/airflow-3.2-<hash>
#   scripts/airflow-env.sh --lock 3.2     # regenerate requirements/airflow-3.2.lock from .in
#
# Envs live outside the worktree, keyed by the lock file's hash, so CI reruns and other
# worktrees share them. taskstate itself is NOT baked in: tests install the current checkout
# with `uv pip install --no-deps` (about a second) so the entry points always match the code.
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-.venv/bin/uv}
PY=${AIRFLOW_PYTHON:-python3.11}

if [ "${1:-}" = "--lock" ]; then
    shift
    version=$1
    "$UV" pip compile --quiet "requirements/airflow-$version.in" --python-version 3.11 \
        -o "requirements/airflow-$version.lock"
    echo "requirements/airflow-$version.lock"
    exit 0
fi

version=${1:?usage: airflow-env.sh [--lock] VERSION (2.10 2.11 3.0 3.1 3.2 3.3)}
lock="requirements/airflow-$version.lock"
[ -f "$lock" ] || { echo "airflow-env: no $lock" >&2; exit 2; }
hash=$(sha256sum "$lock" | cut -c1-12)
root=${TASKSTATE_ENVS:-$HOME/.cache/taskstate/envs}
env="$root/airflow-$version-$hash"
if [ ! -f "$env/.complete" ]; then
    mkdir -p "$root"
    # One builder at a time per env; a second caller waits, then reuses the result.
    exec 9>"$env.lock"
    flock 9
    if [ ! -f "$env/.complete" ]; then
        echo "airflow-env: building $env" >&2
        rm -rf "$env"
        "$UV" venv --quiet --python "$PY" "$env"
        # Bytecode now, once: else every first import in each test's fresh Airflow process
        # compiles Airflow's modules (the lanes start dozens of them). The hash stays the lock's.
        "$UV" pip sync --quiet --compile-bytecode --python "$env/bin/python" "$lock"
        touch "$env/.bytecode" "$env/.complete"
    fi
fi
# An env built before the sync compiled bytecode (its hash is the lock's, so nothing rebuilds
# it) has none, and PYTHONDONTWRITEBYTECODE=1 keeps every Airflow process from writing any:
# each then compiles Airflow's modules again (`import airflow` 5 CPU s instead of 2). Compile
# it once, under the same lock.
if [ ! -f "$env/.bytecode" ]; then
    exec 9>"$env.lock"
    flock 9
    if [ ! -f "$env/.bytecode" ]; then
        echo "airflow-env: compiling bytecode in $env" >&2
        env -u PYTHONDONTWRITEBYTECODE "$env/bin/python" -m compileall -q -j 0 \
            "$env/lib" >/dev/null 2>&1 || true  # a test file that does not compile: skipped
        touch "$env/.bytecode"
    fi
fi
echo "$env"
