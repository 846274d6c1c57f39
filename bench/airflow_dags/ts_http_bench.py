"""The DAG bench/http_backend.py runs on Airflow 3.3 under its scheduler: in one task, the same
get/set through Airflow 3.3.2's native `task_state_store` (each call goes through the task
supervisor to the api-server) and through taskstate's HTTP backend (a keep-alive request to
`taskstate serve`), interleaved call by call."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pendulum
from airflow.sdk import dag, task

OPS = int(os.environ.get("TS_BENCH_OPS", "500"))


def pct(samples: list[int], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000


def timed(fn, *args) -> int:
    start = time.perf_counter_ns()
    fn(*args)
    return time.perf_counter_ns() - start


@dag(start_date=pendulum.datetime(2025, 1, 1), schedule=None, catchup=False)
def ts_http_bench():
    @task
    def ops(**context):
        from taskstate import StateStore, TaskScope

        ti = context["ti"]
        native = context["task_state_store"]
        http = StateStore(os.environ["TS_BENCH_HTTP_URL"]).task_state(
            TaskScope(ti.dag_id, ti.run_id, ti.task_id)
        )
        value = {"cursor": 12345, "note": "x" * 40}
        samples: dict[str, list[int]] = {
            f"{who} {op}": [] for who in ("native", "http") for op in ("set", "get")
        }
        for i in range(OPS):
            key = f"k{i % 50}"
            for who, store in (("native", native), ("http", http)):
                samples[f"{who} set"].append(timed(store.set, key, value))
                samples[f"{who} get"].append(timed(store.get, key))
        result = {
            name: {"p50_us": pct(s, 0.5), "p95_us": pct(s, 0.95), "n": len(s)}
            for name, s in samples.items()
        }
        Path(os.environ["AIRFLOW_HOME"], "http_bench.json").write_text(json.dumps(result))

    ops()


ts_http_bench()
