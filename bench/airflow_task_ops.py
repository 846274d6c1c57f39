"""Per-op latency (p50) of the injected `task_state_store` inside a real Airflow task, on one
Airflow 2 and one Airflow 3, against raw sqlite3 upserts/selects in the same task process.

    .venv/bin/python bench/airflow_task_ops.py [VERSION ...]     # default: 2.10 3.2
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests.airflow.harness

from record import meta, save
from tests.airflow.harness import AirflowHome

DAG = Path(__file__).resolve().parent / "airflow_dags" / "ts_bench.py"


def main(versions: list[str]) -> None:
    started = meta()
    figures = {}
    print(
        "| Airflow | set p50 µs | get p50 µs | raw sqlite3 upsert p50 µs | raw select p50 µs "
        "| set / raw | get / raw |"
    )
    print("|---|---|---|---|---|---|---|")
    for version in versions:
        with tempfile.TemporaryDirectory(prefix=f"ts-bench-{version}-") as tmp:
            home = AirflowHome(version, Path(tmp), [DAG])
            home.dags_test("ts_bench")
            r = json.loads((home.home / "bench.json").read_text())
        figures[home.airflow_version] = r
        print(
            f"| {home.airflow_version} | {r['set_p50_us']:.1f} | {r['get_p50_us']:.1f} "
            f"| {r['raw_set_p50_us']:.1f} | {r['raw_get_p50_us']:.1f} "
            f"| {r['set_p50_us'] / r['raw_set_p50_us']:.2f} "
            f"| {r['get_p50_us'] / r['raw_get_p50_us']:.2f} |"
        )
    command = "bench/airflow_task_ops.py " + " ".join(versions)
    save("airflow_task_ops", figures, command=command, started=started)


if __name__ == "__main__":
    main(sys.argv[1:] or ["2.10", "3.2"])
