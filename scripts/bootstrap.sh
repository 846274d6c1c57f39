#!/usr/bin/env bash
# Create (or refresh) .venv with the pinned development dependencies and taskstate itself.
# Idempotent and quick when nothing changed: the lock file's hash is remembered in the venv.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv
LOCK=requirements/dev.lock
stamp="$VENV/.taskstate-lock-$(sha256sum "$LOCK" pyproject.toml | sha256sum | cut -c1-16)"
if [ -f "$stamp" ]; then exit 0; fi
echo "bootstrap: creating $VENV from $LOCK" >&2
"$PY" -m venv --clear "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "uv==0.13.9"
"$VENV/bin/uv" pip sync --quiet --python "$VENV/bin/python" "$LOCK"
"$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" --no-deps -e .
touch "$stamp"
