"""The timed workloads. Each runs real DAGs (or the real cleanup CLIs) on one side and returns
per-run figures; the tasks time themselves and leave JSON files the driver reads here.

A result is {metric: [one dict per run]}, each dict holding "p50"/"p95" (seconds) or "wall".
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from versus.envs import REPO, AirflowHome, log
from versus.stats import summary

Runs = dict[str, list[dict[str, float]]]


def dags_test(home: AirflowHome, dag_id: str, n: int, out: Path) -> list[dict[str, Any]]:
    """`airflow dags test` one DAG; return what its tasks reported."""
    shutil.rmtree(out, ignore_errors=True)
    wall = home.airflow(
        "dags", "test", dag_id, extra_env={"VERSUS_N": str(n), "VERSUS_OUT": str(out)}
    )
    reports = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    if not reports:
        raise RuntimeError(f"{dag_id}: no task reported (see {home.root}/logs-cli.txt)")
    log(f"  {dag_id}: {len(reports)} task report(s), dags test took {wall:.1f}s")
    return reports


def check_store(side_taskstate: bool, report: dict[str, Any]) -> str:
    """Refuse to compare the wrong thing: A must use Airflow's store, B ours."""
    ours = report["store"].startswith("taskstate.")
    if ours != side_taskstate:
        raise RuntimeError(
            f"expected {'taskstate' if side_taskstate else 'Airflow'}'s store, "
            f"the task used {report['store']}"
        )
    return f"{report['store']} ({report['how']})"


class Skipped(Exception):
    """A workload that cannot run on this side; the reason goes into the report."""


def _add_ops(result: Runs, report: dict[str, Any], kind: str) -> None:
    for op in ("set", "get"):
        result.setdefault(f"{kind} {op}", []).append(summary(report["samples"][op]))


OPS_DAGS = (("versus_task_ops", "task"), ("versus_asset_ops", "asset"))


def per_op(home: AirflowHome, n: int, runs: int, work: Path, stores: dict[str, str]) -> Runs:
    """Workload 1: N set then N get on the task store and on an asset store."""
    result: Runs = {}
    for dag_id, kind in OPS_DAGS:
        for run in range(runs):
            (report,) = dags_test(home, dag_id, n, work / f"{dag_id}-{run}")
            stores[kind] = check_store(home.side.taskstate, report)
            _add_ops(result, report, kind)
    return result


def _need_scheduler(home: AirflowHome) -> None:
    if home.side.airflow_major < 3 and home.metadata_url is None:
        raise Skipped("Airflow 2 refuses the LocalExecutor on a SQLite metadata database")


def per_op_scheduler(
    home: AirflowHome, n: int, runs: int, work: Path, stores: dict[str, str]
) -> Runs:
    """Workload 1 again, triggered runs under a real scheduler + LocalExecutor on loopback."""
    _need_scheduler(home)
    from versus.scheduler import Deployment

    result: Runs = {}
    with Deployment(home, work / f"scheduler-{home.side.airflow}", {"VERSUS_N": str(n)}) as live:
        for dag_id, kind in OPS_DAGS:
            for _ in range(runs):
                (report,) = live.run(dag_id)
                stores[kind] = check_store(home.side.taskstate, report)
                _add_ops(result, report, kind)
    return result


def etl(home: AirflowHome, n: int, runs: int, work: Path, stores: dict[str, str]) -> Runs:
    """Workload 2: the skill's etl_with_checkpoint, one checkpoint per record."""
    walls = []
    for run in range(runs):
        (report,) = dags_test(home, "versus_etl_with_checkpoint", n, work / f"etl-{run}")
        stores["task"] = check_store(home.side.taskstate, report)
        if report["records"] != n:
            raise RuntimeError(f"etl processed {report['records']} records, expected {n}")
        walls.append({"wall": report["wall"]})
    return {f"process_records, {n:,} checkpoints": walls}


def mapped(home: AirflowHome, n: int, runs: int, work: Path, stores: dict[str, str]) -> Runs:
    """Workload 3: 8 mapped partitions, each checkpointing n times."""
    total, longest = [], []
    for run in range(runs):
        reports = dags_test(home, "versus_mapped_partitions", n, work / f"mapped-{run}")
        if sorted(r["map_index"] for r in reports) != list(range(8)):
            raise RuntimeError(f"expected 8 partitions, got {len(reports)} reports")
        stores["task"] = check_store(home.side.taskstate, reports[0])
        walls = [r["wall"] for r in reports]
        total.append({"wall": sum(walls)})
        longest.append({"wall": max(walls)})
    return {
        f"8 partitions × {n:,}: sum of task times": total,
        f"8 partitions × {n:,}: slowest partition": longest,
    }


# -- workload 4: cleanup of expired task rows ---------------------------------------------------

EXPIRED_AIRFLOW = "2020-01-01 00:00:00.000000"  # Airflow's UtcDateTime text form in SQLite


def _airflow_rows(run: tuple[object, ...], rows: int) -> Iterator[tuple[object, ...]]:
    dag_run_id, dag_id, run_id = run
    for i in range(rows):
        yield (dag_run_id, f"seeded_{i // 1000}", -1, f"k{i}", dag_id, run_id, '{"i": 1}',
               EXPIRED_AIRFLOW, EXPIRED_AIRFLOW)  # fmt: skip


AIRFLOW_COLUMNS = (
    "dag_run_id, task_id, map_index, key, dag_id, run_id, value, updated_at, expires_at"
)


def _seed_airflow(home: AirflowHome, rows: int) -> None:
    """Expired rows straight into Airflow 3.3's own table, in its metadata DB."""
    (run,) = home.query("SELECT id, dag_id, run_id FROM dag_run ORDER BY id LIMIT 1")
    if home.metadata_url:
        import psycopg

        copy = f"COPY task_state_store ({AIRFLOW_COLUMNS}) FROM STDIN"
        with (
            psycopg.connect(home.metadata_url.replace("+psycopg2", "")) as conn,
            conn.cursor().copy(copy) as pipe,
        ):
            for row in _airflow_rows(run, rows):
                pipe.write_row(row)
        return
    with sqlite3.connect(home.db) as conn:
        conn.executemany(
            f"INSERT INTO task_state_store ({AIRFLOW_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            _airflow_rows(run, rows),
        )


def _count_airflow(home: AirflowHome) -> int:
    ((count,),) = home.query(
        "SELECT count(*) FROM task_state_store WHERE expires_at < '2021-01-01'"
    )
    return int(str(count))


def _seed_taskstate(db: Path, rows: int) -> None:
    from taskstate.backends.sqlite import MIGRATIONS, TABLE

    expired = time.time() - 86400
    with sqlite3.connect(db) as conn:
        conn.executescript(MIGRATIONS[0])
        conn.executemany(
            f"INSERT INTO {TABLE} (namespace, key, value, expires_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (
                (
                    f"t\x1fseed\x1frun\x1fseeded_{i // 1000}\x1f-1",
                    f"k{i}",
                    '{"i": 1}',
                    expired,
                    expired,
                )
                for i in range(rows)
            ),
        )


def _count_taskstate(db: Path) -> int:
    from taskstate.backends.sqlite import TABLE

    with sqlite3.connect(db) as conn:
        return int(
            conn.execute(
                f"SELECT count(*) FROM {TABLE} WHERE expires_at IS NOT NULL AND expires_at < ?",
                (time.time(),),
            ).fetchone()[0]
        )


def _seed_postgres(url: str, rows: int) -> None:
    import psycopg

    expired = time.time() - 86400
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        columns = "namespace, key, value, expires_at, updated_at"
        with cur.copy(f"COPY taskstate_entries ({columns}) FROM STDIN") as copy:
            for i in range(rows):
                namespace = f"t\x1fseed\x1frun\x1fseeded_{i // 1000}\x1f-1"
                copy.write_row((namespace, f"k{i}", '{"i": 1}', expired, expired))


def _count_postgres(url: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM taskstate_entries WHERE expires_at < %s", (time.time(),)
        ).fetchone()
        return int(row[0]) if row else 0


def cleanup(home: AirflowHome, n: int, runs: int, work: Path, stores: dict[str, str]) -> Runs:
    """Workload 4: seed n expired task rows in the side's own table, time its clean command.

    Besides the whole command, the deletion itself as each command reports it: ours prints
    its duration (`--json`); Airflow's logs "Running task state store cleanup" before and
    "Deleted expired task_state_store rows" after, and the two timestamps bracket it. The same
    command on the then-empty table shows what start-up alone costs.
    """
    side = home.side
    seed: Any
    count: Any
    db: Any
    if side.taskstate:
        command = [str(side.env / "bin" / "taskstate"), "clean", "--json"]
        inner = _taskstate_seconds
        if side.backend == "postgresql":
            seed, count, db = _seed_postgres, _count_postgres, home.taskstate_url
            stores["cleanup"] = "taskstate clean (PostgreSQL)"
        else:
            seed, count, db = _seed_taskstate, _count_taskstate, home.taskstate_db
            stores["cleanup"] = "taskstate clean (embedded SQLite)"
    else:
        if not home.query("SELECT id FROM dag_run LIMIT 1"):  # a dag_run to hang rows on
            dags_test(home, "versus_task_ops", 1, work / "cleanup-dagrun")
        seed, count, db = _seed_airflow, _count_airflow, home
        command = home.command("state-store", "clean")
        inner = _airflow_seconds
        stores["cleanup"] = f"airflow state-store clean (metadata DB: {home.side.metadata_label})"
    full, deletion, empty = [], [], []
    for _ in range(runs):
        seed(db, n)
        wall, output = _timed(home, command)
        full.append({"wall": wall})
        deletion.append({"wall": inner(output)})
        left = count(db)
        if left:
            raise RuntimeError(f"{' '.join(command)} left {left} expired rows")
        empty.append({"wall": _timed(home, command)[0]})
    return {
        f"clean {n:,} expired rows: the deletion, as the command times it": deletion,
        f"clean {n:,} expired rows: whole command": full,
        "the same command with nothing to delete (start-up)": empty,
    }


def _taskstate_seconds(output: str) -> float:
    return float(json.loads(output)["seconds"])


def _airflow_seconds(output: str) -> float:
    from datetime import datetime

    stamps = {}
    for line in output.splitlines():
        for marker in ("Running task state store cleanup", "Deleted expired task_state_store"):
            if marker in line:
                stamps[marker] = datetime.fromisoformat(line.split()[0].replace("Z", "+00:00"))
    if len(stamps) != 2:
        raise RuntimeError(f"airflow state-store clean logged no start/end lines:\n{output}")
    start, end = stamps.values()
    return (end - start).total_seconds()


def _timed(home: AirflowHome, command: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(
        command,
        env=home.env,
        check=True,
        cwd=home.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return time.perf_counter() - started, done.stdout


# -- workload 5: crash scenarios -----------------------------------------------------------------

JOBSYSTEM = REPO / "tests" / "resumable" / "jobsystem.py"
POLL_JOB_S = "VERSUS_POLL_JOB_S"  # read by the crash DAG
KILL_POINTS = ("after_submit", "during_poll")


def _load_jobsystem() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("versus_jobsystem", JOBSYSTEM)
    if spec is None or spec.loader is None:
        raise Skipped(f"cannot load {JOBSYSTEM}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def crash(home: AirflowHome, n: int, runs: int, work: Path, stores: dict[str, str]) -> Runs:
    """Workload 5: n logical jobs per kill point, try 1 SIGKILLed, Airflow retries.

    One row per logical job: jobs the job system created for it, submit calls it received,
    and whether the value the task finally returned is that job's result (or None).
    """
    _need_scheduler(home)
    if not JOBSYSTEM.exists():
        raise Skipped(f"the mixin's job system ({JOBSYSTEM.relative_to(REPO)}) is not here yet")
    jobsystem = _load_jobsystem()
    from versus.scheduler import Deployment

    side = home.side.airflow
    db = work / f"jobs-{side}.db"
    extra = {
        "VERSUS_JOBSYSTEM": str(JOBSYSTEM),
        "VERSUS_JOBS_DB": str(db),
        "VERSUS_CRASH_JOBS": str(n),
    }
    # Every retry blocks in its poll: with fewer slots than jobs, later retries would start
    # after their job finished and only see it succeeded, never reconnecting.
    extra["AIRFLOW__CORE__PARALLELISM"] = str(n + 4)
    result: Runs = {}
    with (
        jobsystem.running_jobsystem(db) as jobs,
        Deployment(home, work / f"crash-{side}", extra) as live,
    ):
        for kill_at in KILL_POINTS:
            reports = live.run(f"versus_crash_{kill_at}", tasks=n, timeout=1800)
            # A poll-killed job that finished before the retry started is "already succeeded",
            # not a reconnect: the job must outlast the retry's scheduling delay.
            stores["job length when killed in poll"] = f"{os.environ.get(POLL_JOB_S, '120')} s"
            by_job: dict[str, list[dict[str, Any]]] = {}
            for report in reports:
                by_job.setdefault(report["logical"], []).append(report)
            for logical, returned in by_job.items():
                report = max(returned, key=lambda r: r["try_number"])  # the last word
                stores["mixin"] = report["mixin"] + ".ResumableJobMixin"
                stores["task"] = check_store(home.side.taskstate, report)
                value = report["result"]
                expected = jobsystem.expected_output(logical)
                result.setdefault(kill_at, []).append(
                    {
                        "jobs": len(jobs.jobs_for(logical)),
                        "submits": len(jobs.submissions_for(logical)),
                        "correct": float(
                            isinstance(value, dict) and value.get("output") == expected
                        ),
                        "none": float(value is None),
                        "killed_once": float(report["try_number"] >= 2),
                        "returns": len(returned),
                    }
                )
    return result
