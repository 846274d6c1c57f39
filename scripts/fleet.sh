#!/usr/bin/env bash
# A whole deployment on loopback, kept running until Ctrl-C: its own PostgreSQL <- PgBouncer
# (transaction pooling) <- N `taskstate serve` replicas sharing one secret key <- HAProxy (round
# robin, health check on /taskstate/health, retry-on conn-failure only). Prints every part's
# URL and a pool token; the configs it writes are under the printed haproxy.cfg's directory.
#   bash scripts/fleet.sh [--replicas 3] [--serve-workers 2]
# bench/fleet.py drives one with workers and faults; tests/test_fleet.py is the CI run.
# Debian's postgresql, pgbouncer and haproxy are installed on first use when run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/python -m tests.fleet up "$@"
