"""Worker and triggerer SIGKILLs under a real scheduler: jobs per logical job for a deferrable
operator on taskstate's mixin, the same operator with `durable=False`, and (on 3.3) Airflow
3.3.2's own providers' deferrable path, same rounds.

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

With `--version 3.3` (unless `--no-upstream`), a second deployment of Airflow 3.3.2 without
taskstate (its own AIP-103 state store, `task_state_store` Airflow's) runs, in the same
rounds and at the same time, tests/airflow/provider_dags/ts_upstream_deferrable.py: Amazon's
`RedshiftDataOperator` and `GlueJobOperator` (the provider's operators that subclass Airflow's
`ResumableJobMixin` and have a deferrable mode) with `deferrable=True`, the same two tasks and
kill points each, against the tests' AWS server (tests/aws_server.py, jobs of
`--job-seconds`); its triggerer is SIGKILLed once both re-deferred triggers polled their jobs
twice.

A logical job is one task of one run; the job system (or the AWS server's ledger) counts the
jobs it created for each.

    .venv/bin/python bench/deferrable_scheduler.py [--runs 5] [--version 3.3] [--no-upstream]

Prints a markdown table. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
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
UPSTREAM_DAG = REPO / "tests" / "airflow" / "provider_dags" / "ts_upstream_deferrable.py"
UPSTREAM = {  # side -> task id prefix in ts_upstream_deferrable
    "3.3.2 RedshiftDataOperator": "redshift_",
    "3.3.2 GlueJobOperator": "glue_",
}
# Statuses the AWS server answers for a job that is still running, and for one that succeeded.
RUNNING = {"SUBMITTED", "PICKED", "STARTED", "STARTING", "RUNNING", "WAITING"}
SUCCEEDED = {"FINISHED", "SUCCEEDED"}


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@dataclass
class Upstream:
    """The Airflow 3.3.2 deployment without taskstate and its AWS server."""

    deployment: Any
    aws: Any
    out: Path
    job_seconds: float


@dataclass
class UpstreamRound:
    """One run of ts_upstream_deferrable: when to SIGKILL its triggerer, and what it polled."""

    up: Upstream
    run_id: str
    killed_at: float | None = None
    ready_since: float | None = None
    at_kill: dict[str, Any] = field(default_factory=dict)

    def jobs(self, task: str) -> set[str]:
        logical = f"{self.run_id}|{task}"
        return {e["id"] for e in self.up.aws.submissions() if e["logical"] == logical}

    def polls_since(self, task: str, since: float) -> list[dict[str, Any]]:
        ids = self.jobs(task)
        return [p for p in self.up.aws.polls() if p["id"] in ids and p["at"] > since]

    def deferred_retry(self, task: str) -> float | None:
        """When a retry (try ≥ 2) of `task` handed its job to a trigger, if it did."""
        for line in lines(self.up.out / f"{self.run_id}.{task}.deferred"):
            attempt, at = line.split()
            if int(attempt) >= 2:
                return float(at)
        return None

    def meanwhile(self) -> None:
        if self.killed_at is not None:
            return
        tasks = [f"{prefix}defer_then_trigger" for prefix in UPSTREAM.values()]
        deferred = {task: self.deferred_retry(task) for task in tasks}
        polled = {
            task: at is not None and len(self.polls_since(task, at)) >= 2
            for task, at in deferred.items()
        }
        if not any(polled.values()):
            return
        now = time.time()
        self.ready_since = self.ready_since or now
        # Both triggers in one kill; a straggler gets 60 s before the kill goes ahead without it.
        if not all(polled.values()) and now - self.ready_since < 60:
            return
        for task, at in deferred.items():
            before = self.polls_since(task, at) if at is not None else []
            self.at_kill[task] = before[-1]["status"] if before else None
        self.up.deployment.kill_triggerer()
        self.killed_at = time.time()

    def rows(self, reports: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        by_task = {r["task_id"]: r for r in reports}
        ledger = self.up.aws.submissions()
        polls = self.up.aws.polls()
        found: dict[str, dict[str, Any]] = {}
        for side, prefix in UPSTREAM.items():
            row: dict[str, Any] = {"jobs": {}, "worker_kills": 0, "right": 0}
            for task in TASKS:
                name = prefix + task
                logical = f"{self.run_id}|{name}"
                ours = [e["id"] for e in ledger if e["logical"] == logical]
                row["jobs"][name] = len(ours)
                result = by_task[name]["result"]
                ids = result if isinstance(result, list) else [result]
                succeeded = {p["id"] for p in polls if p["status"] in SUCCEEDED}
                row["right"] += bool(ids) and all(i in ours and i in succeeded for i in ids)
                row["worker_kills"] += len(lines(self.up.out / f"{self.run_id}.{name}.kills"))
            task = prefix + "defer_then_trigger"
            status = self.at_kill.get(task)
            row["triggerer_kills"] = int(self.killed_at is not None and status in RUNNING)
            row["status_at_kill"] = status
            row["polls_after_kill"] = (
                len(self.polls_since(task, self.killed_at)) if self.killed_at else 0
            )
            found[side] = row
        return found


@contextlib.contextmanager
def upstream_deployment(root: Path, job_seconds: float) -> Iterator[Upstream]:
    """Airflow 3.3.2 without taskstate (scheduler, triggerer, LocalExecutor) running
    ts_upstream_deferrable against its own AWS server."""
    from tests.aws_server import running_aws
    from versus.envs import AirflowHome, Side
    from versus.scheduler import Deployment

    side = Side("Airflow 3.3.2 native", "3.3", taskstate=False)
    side.prepare()
    home = AirflowHome(side, root / "home")
    (home.root / "dags" / "versus_dags.py").unlink()
    shutil.copy(UPSTREAM_DAG, home.root / "dags")
    out = root / "out"
    out.mkdir()
    with running_aws(root, job_seconds=job_seconds) as aws:
        extra = {"AIRFLOW_CONN_AWS_DEFAULT": aws.airflow_connection()}
        with Deployment(home, out, extra, triggerer=True) as deployment:
            yield Upstream(deployment, aws, out, job_seconds)


def one_round(live: Any, up: Upstream | None) -> dict[str, dict[str, Any]]:
    """One run of each DAG, driven to the end; per side: jobs per logical job, kills, results."""
    deployment, out, jobs = live.deployment, live.out, live.jobs
    runs = {side: deployment.start_run(dag) for side, (dag, _) in SIDES.items()}
    upstream = UpstreamRound(up, up.deployment.start_run("ts_upstream_deferrable")) if up else None
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
        if upstream is not None:
            upstream.meanwhile()

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
    if upstream is not None:
        reports = upstream.up.deployment.finish(
            "ts_upstream_deferrable",
            upstream.run_id,
            len(TASKS) * len(UPSTREAM),
            meanwhile=meanwhile,
        )
        found.update(upstream.rows(reports))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--version", default="3.3")
    parser.add_argument("--no-upstream", action="store_true", help="leave out 3.3.2's providers")
    parser.add_argument("--job-seconds", type=float, default=20.0, help="the AWS jobs' length")
    args = parser.parse_args()
    started = meta()
    with_upstream = args.version == "3.3" and not args.no_upstream
    sides = [*SIDES, *(UPSTREAM if with_upstream else ())]
    totals = {side: Counter[str]() for side in sides}
    per_job: dict[str, Counter[int]] = {side: Counter() for side in sides}
    extra: dict[str, list[Any]] = {side: [] for side in UPSTREAM}
    by_task: dict[str, dict[str, list[int]]] = {side: {t: [] for t in TASKS} for side in sides}
    loads = [os.getloadavg()[0]]
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        (tmp / "taskstate").mkdir()
        live = stack.enter_context(kill_deployment(args.version, tmp / "taskstate"))
        up = None
        if with_upstream:
            (tmp / "upstream").mkdir()
            up = stack.enter_context(upstream_deployment(tmp / "upstream", args.job_seconds))
        for n in range(args.runs):
            found = one_round(live, up)
            for side, row in found.items():
                per_job[side].update(row["jobs"].values())
                for name, count in row["jobs"].items():
                    by_task[side][next(t for t in TASKS if name.endswith(t))].append(count)
                totals[side].update(
                    logical=len(row["jobs"]), jobs=sum(row["jobs"].values()), right=row["right"],
                    worker_kills=row["worker_kills"], triggerer_kills=row["triggerer_kills"],
                )  # fmt: skip
                if side in extra:
                    extra[side].append((row["status_at_kill"], row["polls_after_kill"]))
            loads.append(os.getloadavg()[0])
            print(f"run {n + 1}/{args.runs}: {found} (load {loads[-1]:.1f})", flush=True)
    print(f"\nAirflow {args.version}, {args.runs} runs per side, LocalExecutor, load "
          f"{min(loads):.1f}–{max(loads):.1f} ({os.cpu_count()} cores)\n")  # fmt: skip
    print("| side | logical jobs | jobs | jobs per logical job (count) | worker kills | "
          "triggerer kills | right results |")  # fmt: skip
    print("|---|---:|---:|---|---:|---:|---:|")
    figures: dict[str, Any] = {"version": args.version, "runs": args.runs, "load": loads}
    for side in sides:
        t = totals[side]
        spread = ", ".join(f"{k}: {v}" for k, v in sorted(per_job[side].items()))
        print(f"| {side} | {t['logical']} | {t['jobs']} | {spread} | {t['worker_kills']} | "
              f"{t['triggerer_kills']} | {t['right']} of {t['logical']} |")  # fmt: skip
        figures[side] = {
            **t, "jobs_per_logical_job": dict(per_job[side]), "jobs_by_task": by_task[side]
        }  # fmt: skip
        if side in extra:  # the job's status at the triggerer kill, polls after it
            figures[side]["at_triggerer_kill"] = extra[side]
    print("\nJobs per logical job by task, per run\n")
    print(f"| side | {' | '.join(TASKS)} |")
    print("|---|" + "---|" * len(TASKS))
    for side in sides:
        print(f"| {side} | " + " | ".join(str(by_task[side][t]) for t in TASKS) + " |")
    if with_upstream:
        print(
            "\nUpstream triggerer kills count only where the job was still running; "
            f"(status at the kill, polls after it) per run: {extra}"
        )
    command = f"bench/deferrable_scheduler.py --runs {args.runs} --version {args.version}"
    if with_upstream:
        command += f" --job-seconds {args.job_seconds:g}"
    else:
        command += " --no-upstream"
    save("deferrable_scheduler", figures, command=command, started=started)


if __name__ == "__main__":
    main()
