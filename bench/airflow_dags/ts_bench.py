"""The DAG bench/airflow_task_ops.py runs: time get/set on the injected task_state_store inside
a real task, and the same upserts/selects on a raw sqlite3 connection in the same process."""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import time
from pathlib import Path

import pendulum

try:
    from airflow.sdk import dag, task
except ImportError:  # Airflow 2
    from airflow.decorators import dag, task

OPS = int(os.environ.get("TS_BENCH_OPS", "2000"))


def p50_us(samples: list[int]) -> float:
    return statistics.median(samples) / 1000


def timed(fn, n: int) -> list[int]:
    out = []
    for i in range(n):
        start = time.perf_counter_ns()
        fn(i)
        out.append(time.perf_counter_ns() - start)
    return out


@dag(start_date=pendulum.datetime(2025, 1, 1), schedule=None, catchup=False)
def ts_bench():
    @task
    def ops(task_state_store=None):
        value = {"cursor": 12345, "note": "x" * 40}
        sets = timed(lambda i: task_state_store.set(f"k{i % 50}", value), OPS)
        gets = timed(lambda i: task_state_store.get(f"k{i % 50}"), OPS)

        home = Path(os.environ["AIRFLOW_HOME"])
        raw = sqlite3.connect(home / "raw.db", isolation_level=None)
        raw.execute("PRAGMA journal_mode=WAL")
        raw.execute("PRAGMA synchronous=NORMAL")
        raw.execute("CREATE TABLE IF NOT EXISTS kv (ns TEXT, k TEXT, v TEXT, PRIMARY KEY (ns, k))")
        text = json.dumps(value)
        upsert = (
            "INSERT INTO kv VALUES ('ns', ?, ?) ON CONFLICT (ns, k) DO UPDATE SET v = excluded.v"
        )
        raw_sets = timed(lambda i: raw.execute(upsert, (f"k{i % 50}", text)), OPS)
        select = "SELECT v FROM kv WHERE ns = 'ns' AND k = ?"
        raw_gets = timed(
            lambda i: json.loads(raw.execute(select, (f"k{i % 50}",)).fetchone()[0]), OPS
        )
        result = {
            "set_p50_us": p50_us(sets),
            "get_p50_us": p50_us(gets),
            "raw_set_p50_us": p50_us(raw_sets),
            "raw_get_p50_us": p50_us(raw_gets),
            "ops": OPS,
        }
        (home / "bench.json").write_text(json.dumps(result))

    ops()


ts_bench()
