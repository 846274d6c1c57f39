"""Worker and triggerer SIGKILLs under a real scheduler: jobs per logical job for a deferrable
operator on taskstate's mixin against the same operator with `durable=False`, same runs.

One deployment (Airflow 3.3 in taskstate mode by default: api-server, dag-processor, scheduler,
triggerer, LocalExecutor; the test's, `tests.airflow.test_resumable_kill.kill_deployment`) and
the tests' job system. Each round triggers one run of each DAG of
tests/airflow/resumable_dags/ts_deferrable_kill.py at once:

- `ts_deferrable_kill` (taskstate): `accept_then_complete` — the worker SIGKILLed after the
  job system accepted the job, then in `execute_complete`; `defer_then_trigger` — the worker
  SIGKILLed after saving the id before `defer()`, then the triggerer SIGKILLed while the
  re-deferred trigger polls (a new triggerer is started; the job is held until it polled);
- `ts_deferrable_kill_plain`: the same operator and worker kill points with `durable=False`
  (its triggers die with the same triggerer).

A logical job is one task of one run; the job system counts the jobs it created for each.

    .venv/bin/python bench/deferrable_scheduler.py [--runs 5] [--version 3.3]

Prints a markdown table. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

from record import meta, save  # noqa: E402
from tests.airflow.test_resumable_kill import kill_deployment  # noqa: E402

SIDES = {  # side -> (DAG, task id prefix)
    "taskstate": ("ts_deferrable_kill", ""),
    "durable=False": ("ts_deferrable_kill_plain", "plain_"),
}
TASKS = ("accept_then_complete", "defer_then_trigger")


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def one_round(live: Any) -> dict[str, dict[str, Any]]:
    """One run of each DAG, driven to the end; per side: jobs per logical job, kills, results."""
    deployment, out, jobs = live.deployment, live.out, live.jobs
    runs = {side: deployment.start_run(dag) for side, (dag, _) in SIDES.items()}
    ts_run, plain_run = runs["taskstate"], runs["durable=False"]
    ts_polls = out / f"{ts_run}.defer_then_trigger.polls"
    plain_polls = out / f"{plain_run}.plain_defer_then_trigger.polls"
    killed: list[int] = []
    released: set[str] = set()

    def meanwhile() -> None:
        marker = out / f"{ts_run}.defer_then_trigger.kill-triggerer"
        if not killed and marker.exists():
            killed.append(len(lines(ts_polls)))
            deployment.kill_triggerer()
        if killed and "taskstate" not in released and len(lines(ts_polls)) > killed[0]:
            released.add("taskstate")  # the re-created trigger polled the held job
            jobs.release(f"{ts_run}/defer_then_trigger")
        if "plain" not in released and len(lines(plain_polls)) >= 2:
            released.add("plain")
            jobs.release(f"{plain_run}/plain_defer_then_trigger")

    found: dict[str, dict[str, Any]] = {}
    for side, (dag, prefix) in SIDES.items():
        reports = deployment.finish(dag, runs[side], tasks=len(TASKS), meanwhile=meanwhile)
        row: dict[str, Any] = {"jobs": {}, "worker_kills": 0, "right": 0}
        for report in reports:
            created = jobs.jobs_for(report["logical"])
            row["jobs"][report["task_id"]] = len(created)
            expected = {"job_id": report["result"]["job_id"],
                        "output": live.jobsystem.expected_output(report["logical"])}  # fmt: skip
            ours = [job_id for job_id, _ in created]
            row["right"] += report["result"] == expected and report["result"]["job_id"] in ours
        for task in TASKS:
            row["worker_kills"] += len(lines(out / f"{runs[side]}.{prefix}{task}.kills"))
        row["triggerer_kills"] = len(killed) if side == "taskstate" else 0
        found[side] = row
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--version", default="3.3")
    args = parser.parse_args()
    started = meta()
    totals = {side: Counter[str]() for side in SIDES}
    per_job: dict[str, Counter[int]] = {side: Counter() for side in SIDES}
    with tempfile.TemporaryDirectory() as tmp, kill_deployment(args.version, Path(tmp)) as live:
        for n in range(args.runs):
            found = one_round(live)
            for side, row in found.items():
                per_job[side].update(row["jobs"].values())
                totals[side].update(
                    logical=len(row["jobs"]), jobs=sum(row["jobs"].values()), right=row["right"],
                    worker_kills=row["worker_kills"], triggerer_kills=row["triggerer_kills"],
                )  # fmt: skip
            print(f"run {n + 1}/{args.runs}: {found} (load {os.getloadavg()[0]:.1f})", flush=True)
    print(f"\nAirflow {args.version}, {args.runs} runs per side, one deployment, LocalExecutor "
          f"(load at the end {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores)\n")  # fmt: skip
    print("| side | logical jobs | jobs | jobs per logical job (count) | worker kills | "
          "triggerer kills | right results |")  # fmt: skip
    print("|---|---:|---:|---|---:|---:|---:|")
    figures: dict[str, Any] = {"version": args.version, "runs": args.runs}
    for side in SIDES:
        t = totals[side]
        spread = ", ".join(f"{k}: {v}" for k, v in sorted(per_job[side].items()))
        print(f"| {side} | {t['logical']} | {t['jobs']} | {spread} | {t['worker_kills']} | "
              f"{t['triggerer_kills']} | {t['right']} of {t['logical']} |")  # fmt: skip
        figures[side] = {**t, "jobs_per_logical_job": dict(per_job[side])}
    save("deferrable_scheduler", figures, command="bench/deferrable_scheduler.py", started=started)


if __name__ == "__main__":
    main()
