"""Per-op p50/p95 of task state from inside a real Airflow task: taskstate's HTTP backend
(against `taskstate serve` on loopback, SQLite behind it) vs Airflow 3.3.2's native store (the
task's calls go through its supervisor to the api-server), interleaved call by call in one task
run under Airflow 3.3's scheduler and LocalExecutor. Not in CI.

    .venv/bin/python bench/http_backend.py [--ops 500]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # examples.airflow.demo

from examples.airflow.demo import Airflow, free_port  # noqa: E402
from record import meta, save  # noqa: E402

DAG = REPO / "bench" / "airflow_dags" / "ts_http_bench.py"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=500)
    args = parser.parse_args()
    started = meta()
    root = Path(tempfile.mkdtemp(prefix="ts-http-bench-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}/taskstate"
    airflow = Airflow(
        root / "airflow", "3.3", extra={"TS_BENCH_HTTP_URL": url, "TS_BENCH_OPS": str(args.ops)}
    )
    shutil.copy(DAG, airflow.home / "dags" / DAG.name)
    airflow.run("dags", "reserialize")
    server = subprocess.Popen(
        [str(airflow.env / "bin" / "python"), "-m", "taskstate",
         "--url", f"sqlite:///{root}/served.db", "serve", "--port", str(port),
         "--log-level", "warning"],
        env={**airflow.environ, "AIRFLOW_HOME": str(root)},
    )  # fmt: skip
    try:
        with airflow.services():
            airflow.run("dags", "unpause", "ts_http_bench")
            airflow.run("dags", "trigger", "ts_http_bench")
            out = airflow.home / "http_bench.json"
            deadline = time.monotonic() + 900
            while not out.exists():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no result; see {airflow.home}")
                time.sleep(2)
            result = json.loads(out.read_text())
    finally:
        server.terminate()
        server.wait()
    print(f"Airflow 3.3 task, {args.ops} interleaved calls per op, load {os.getloadavg()[0]:.2f}")
    print("| op | native p50 µs | native p95 µs | http p50 µs | http p95 µs | native / http p50 |")
    print("|---|---|---|---|---|---|")
    for op in ("set", "get"):
        n, h = result[f"native {op}"], result[f"http {op}"]
        print(
            f"| {op} | {n['p50_us']:.0f} | {n['p95_us']:.0f} | {h['p50_us']:.0f} "
            f"| {h['p95_us']:.0f} | {n['p50_us'] / h['p50_us']:.1f}× |"
        )
    save("http_backend", result, command=f"bench/http_backend.py --ops {args.ops}", started=started)


if __name__ == "__main__":
    main()
