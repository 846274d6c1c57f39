"""Side-by-side benchmark: Airflow 3.3.2's native state store vs taskstate on Airflow 3.2/2.11.

    bash scripts/bench.sh            # full run (about an hour on 2 cores) -> bench/RESULTS.md
    bash scripts/bench.sh --smoke    # tiny N, one run each, report in the work dir
    bash scripts/bench.sh --only per_op,etl --sides A,B-3.2

Runs under the project's .venv and never imports Airflow itself: every Airflow process runs in
its own pinned environment (scripts/airflow-env.sh).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from versus.envs import REPO, AirflowHome, Side, log
from versus.report import Section, commit, render
from versus.workloads import Runs, Skipped, cleanup, crash, etl, mapped, per_op, per_op_scheduler

Workload = Callable[[AirflowHome, int, int, Path, dict[str, str]], Runs]

# name -> (function, full N, smoke N, section title, note)
WORKLOADS: dict[str, tuple[Workload, int, int, str, str]] = {
    "per_op": (
        per_op,
        2000,
        20,
        "1. Per-op latency, `airflow dags test`",
        "N `set` then N `get` of a small dict, on the task store and on an asset store "
        "(N = {n:,}), timed around each call inside the task.",
    ),
    "scheduler": (
        per_op_scheduler,
        2000,
        20,
        "1b. Per-op latency under a real scheduler + LocalExecutor",
        "Workload 1 as production runs it: triggered DAG runs executed by a real "
        "scheduler with the LocalExecutor (Airflow 3: plus dag-processor and api-server, "
        "all on 127.0.0.1; metadata database per side above); N = {n:,}.",
    ),
    "etl": (
        etl,
        10_000,
        50,
        "2. The skill's `etl_with_checkpoint`",
        '{n:,} records, one `set("last_cursor", ...)` per record; wall time of the whole '
        "task body (`airflow dags test`).",
    ),
    "mapped": (
        mapped,
        1000,
        10,
        "3. Mapped task, 8 partitions",
        "`process_partition.expand(partition_id=range(8))`, each index checkpointing "
        "{n:,} times; per-index task time (`airflow dags test` runs indices one after "
        "another).",
    ),
    "cleanup": (
        cleanup,
        100_000,
        1000,
        "4. Cleanup of expired task rows",
        "{n:,} expired task rows seeded directly in each store's own table, then "
        "Airflow's `airflow state-store clean` vs our `taskstate clean`, timed around "
        "the whole CLI process.",
    ),
    "crash": (
        crash,
        20,
        3,
        "5. Crash scenarios of the resumable-job mixin",
        "{n} logical jobs per kill point (a mapped `VersusBatchOperator`, one job per map "
        "index) against the tests' job system (`tests/resumable/jobsystem.py`), under the "
        "real scheduler; try 1 SIGKILLs its own task process either right after the job "
        "system accepted the job (before the mixin can store its id) or while polling a "
        "running job; Airflow retries. Jobs created are what the job system would bill. "
        "taskstate's operator passes the mixin's idempotency token (the job system dedupes "
        "by it) and implements `find_job`; Airflow 3.3.2's mixin has neither.",
    ),
}

SIDES = {
    "A": Side("A: Airflow 3.3.2 native", "3.3", taskstate=False),
    "B-3.2": Side("B: taskstate on Airflow 3.2, SQLite", "3.2", taskstate=True),
    "B-2.11": Side("B: taskstate on Airflow 2.11, SQLite", "2.11", True, metadata="postgresql"),
    "B-3.2-pg": Side("B: taskstate on Airflow 3.2, PostgreSQL", "3.2", True, "postgresql"),
}
POSTGRES_HARNESS = REPO / "tests" / "postgres_server.py"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench.sh", description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny N, one run each")
    parser.add_argument("--runs", type=int, help="runs per timing (default 3; smoke 1)")
    parser.add_argument("--only", help=f"comma-separated workloads: {','.join(WORKLOADS)}")
    parser.add_argument("--sides", help=f"comma-separated sides: {','.join(SIDES)}")
    parser.add_argument(
        "--output",
        type=Path,
        help="report path (default bench/RESULTS.md; smoke: <workdir>/RESULTS.md)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work dir (logs, DBs)")
    parser.add_argument(
        "--render", action="store_true", help="only re-render the report from its .json"
    )
    args = parser.parse_args(argv)
    runs = args.runs or (1 if args.smoke else 3)
    chosen = args.only.split(",") if args.only else list(WORKLOADS)
    sides = [SIDES[s] for s in (args.sides.split(",") if args.sides else SIDES)]
    unknown = [w for w in chosen if w not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload(s) {unknown}; choose from {list(WORKLOADS)}")
    work = Path(tempfile.mkdtemp(prefix="taskstate-versus-"))
    output = args.output or (work / "RESULTS.md" if args.smoke else REPO / "bench" / "RESULTS.md")
    # Raw figures per side, kept next to the report, so sides measured in separate runs
    # (`--sides`) still make one report; each side says when and at which commit it ran.
    data_path = output.with_suffix(".json")
    if args.render:
        sides = []
    stack = contextlib.ExitStack()
    try:
        for side in sides:
            log(f"== {side.name}")
            url = None
            if "postgresql" in (side.backend, side.metadata):
                if not POSTGRES_HARNESS.exists():
                    log(f"skipping {side.name}: no {POSTGRES_HARNESS}")
                    continue
                url = stack.enter_context(_postgres()).url
            side.prepare()
            home = AirflowHome(side, work / f"{side.airflow}-{side.backend}" / "home", url)
            record: dict[str, Any] = {"workloads": {}}
            record.update(
                describe=_describe(side),
                commit=commit(),
                runs=runs,
                smoke=args.smoke,
                measured=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            )
            for name in chosen:
                function, full_n, smoke_n, *_ = WORKLOADS[name]
                n = smoke_n if args.smoke else full_n
                log(f"{name} on {side.name}")
                stores: dict[str, str] = {}
                entry: dict[str, Any] = {"n": n, "stores": stores, "runs": runs}
                try:
                    entry["results"] = function(home, n, runs, work, stores)
                except Skipped as why:
                    entry["skipped"] = str(why)
                record["workloads"][name] = entry
                _save(data_path, side.name, record)
            stack.close()  # this side's PostgreSQL server, if any
    finally:
        stack.close()
        data = json.loads(data_path.read_text()) if data_path.exists() else {"sides": {}}
        text = render(_sections(data), data["sides"], baseline=SIDES["A"].name)
        output.write_text(text + "\n")
        print(text)
        log(f"report written to {output} (raw figures: {data_path})")
        if args.keep or args.smoke:
            log(f"work dir kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def _save(path: Path, side: str, record: dict[str, Any]) -> None:
    """Replace one side's figures (and its workloads measured so far) in the .json, under a
    lock, so concurrent runs of different sides both land."""
    import fcntl

    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    lock_path = Path(tempfile.gettempdir()) / f"versus-{key}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(path.read_text()) if path.exists() else {"sides": {}}
        old = data["sides"].get(side, {}).get("workloads", {})
        data["sides"][side] = {**record, "workloads": {**old, **record["workloads"]}}
        path.write_text(json.dumps(data, indent=1) + "\n")


def _sections(data: dict[str, Any]) -> list[Section]:
    """One section per workload, sides in the order of SIDES."""
    order = [s.name for s in SIDES.values()]
    sides = sorted(data["sides"].items(), key=lambda kv: order.index(kv[0]))
    sections = []
    for name, (_, full_n, _, title, note) in WORKLOADS.items():
        entries = [
            (side, rec["workloads"][name]) for side, rec in sides if name in rec["workloads"]
        ]
        if not entries:
            continue
        sizes = sorted({entry["n"] for _, entry in entries})
        section = Section(title, note.format(n=sizes[-1]), crash=name == "crash")
        if sizes != [full_n]:
            section.note += f" **N differs from the full run's {full_n:,}: {sizes}.**"
        for side, entry in entries:
            if "skipped" in entry:
                section.skipped[side] = entry["skipped"]
            else:
                section.results[side] = entry["results"]
                section.stores[side] = entry["stores"]
        sections.append(section)
    return sections


def _postgres() -> Any:
    """A throwaway server from the tests' harness (127.0.0.1, free port, removed after)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("versus_postgres_server", POSTGRES_HARNESS)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {POSTGRES_HARNESS}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.running_server()


def _describe(side: Side) -> str:
    import subprocess

    code = (
        "import importlib.metadata as m, sys; v = lambda d: m.version(d); "
        "print('apache-airflow', v('apache-airflow'), '| task-sdk', "
        "v('apache-airflow-task-sdk') if sys.argv[1] == '3' else '-', '| taskstate', "
        "v('taskstate') if sys.argv[2] == '1' else 'not installed', '| Python', "
        "sys.version.split()[0])"
    )
    out = subprocess.run(
        [
            str(side.env / "bin" / "python"),
            "-c",
            code,
            str(side.airflow_major),
            "1" if side.taskstate else "0",
        ],
        capture_output=True,
        text=True,
    )
    versions = out.stdout.strip() or out.stderr.strip()[-200:]
    metadata = {"sqlite": "SQLite", "postgresql": "PostgreSQL (psycopg2)"}[side.metadata]
    return f"{versions} | Airflow metadata DB: {metadata} | env `{side.env}`"


if __name__ == "__main__":
    sys.exit(main())
