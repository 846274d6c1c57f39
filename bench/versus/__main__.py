"""Side-by-side benchmark: Airflow 3.3.2's native state store vs taskstate on Airflow 3.2/2.11.

    bash scripts/bench.sh            # full run (hours on 2 shared cores) -> bench/RESULTS.md
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
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from versus.envs import REPO, AirflowHome, Side, log
from versus.report import MixedRuns, Section, commit, render
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
        "Airflow's `airflow state-store clean` vs our `taskstate clean`: the deletion as each "
        "command times it (compare these), the whole CLI process, and the CLI with nothing to "
        "delete (its start-up).",
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
        "by it) and implements `find_job`; Airflow 3.3.2's mixin has neither. A retry "
        "*reconnects* only if the polled job is still running when it starts; if the job "
        "already finished (the retry waited longer than the job ran), both mixins take the "
        "already-succeeded path and return the result, so the 'returned None' column counts "
        "Airflow 3.3.2's reconnects. 'Tries that returned' above the job count means Airflow "
        "ran a try again after it had succeeded (seen on Airflow 2.11 after SIGKILLs); the "
        "last try's value is the one reported.",
    ),
}

# key -> side; the key is what `--sides` takes and what the .json is keyed by.
SIDES = {
    "A": Side("A: Airflow 3.3.2 native", "3.3", taskstate=False),
    "A-pg": Side("A: Airflow 3.3.2 native", "3.3", taskstate=False, metadata="postgresql"),
    "B-3.2": Side("B: taskstate on Airflow 3.2", "3.2", taskstate=True),
    "B-3.2-full": Side("B: taskstate on Airflow 3.2", "3.2", taskstate=True, synchronous="full"),
    "B-2.11": Side("B: taskstate on Airflow 2.11", "2.11", taskstate=True, metadata="postgresql"),
    "B-3.2-pg": Side(
        "B: taskstate on Airflow 3.2", "3.2", True, backend="postgresql", metadata="postgresql"
    ),
}
POSTGRES_HARNESS = REPO / "tests" / "postgres_server.py"
SINGLE_RUN = {"crash"}  # n logical jobs per kill point: one pass per side, not `runs`


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
    parser.add_argument(
        "--allow-mixed",
        action="store_true",
        help="render figures of several invocations into one report (each row then says so)",
    )
    parser.add_argument(
        "--max-load",
        type=float,
        default=2.0 * (os.cpu_count() or 1),
        help="1-min load average above which a repetition is marked (default 2 × cores)",
    )
    parser.add_argument(
        "--repeat-loaded",
        type=int,
        default=1,
        help="extra repetitions, per workload and side, for those measured above --max-load",
    )
    args = parser.parse_args(argv)
    # A stopped run (kill PID) still stops its servers and writes the report of what it measured.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    runs = args.runs or (1 if args.smoke else 3)
    chosen = args.only.split(",") if args.only else list(WORKLOADS)
    keys = args.sides.split(",") if args.sides else list(SIDES)
    unknown = [w for w in chosen if w not in WORKLOADS] + [k for k in keys if k not in SIDES]
    if unknown:
        parser.error(f"unknown workload(s)/side(s) {unknown}; see --help")
    work = Path(tempfile.mkdtemp(prefix="taskstate-versus-"))
    output = args.output or (work / "RESULTS.md" if args.smoke else REPO / "bench" / "RESULTS.md")
    # Raw figures, kept next to the report: every measurement carries its invocation's id, the
    # commit, the time and the load, so a report never silently mixes runs (see --allow-mixed).
    data_path = output.with_suffix(".json")
    stack = contextlib.ExitStack()
    invocation = {
        "id": time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()),
        "commit": commit(),
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "runs": runs,
        "smoke": args.smoke,
        "max_load": args.max_load,
        "repeat_loaded": args.repeat_loaded,
        "workloads": chosen,
        "sides": keys,
        "finished": None,
    }
    try:
        if not args.render:
            _start_invocation(data_path, invocation)
            homes = _prepare(keys, work, stack, invocation["id"], data_path)
            for name in chosen:
                _measure(name, homes, runs, args, work, invocation, data_path)
            invocation["finished"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            _start_invocation(data_path, invocation)
    finally:
        stack.close()
        data = json.loads(data_path.read_text()) if data_path.exists() else {"sides": {}}
        try:
            text = render(
                _sections(data), data, baseline=["A", "A-pg"], allow_mixed=args.allow_mixed
            )
        except MixedRuns as refused:
            log(str(refused))
            return 2
        output.write_text(text + "\n")
        print(text)
        log(f"report written to {output} (raw figures: {data_path})")
        if args.keep or args.smoke:
            log(f"work dir kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def _prepare(
    keys: list[str], work: Path, stack: contextlib.ExitStack, run_id: str, data_path: Path
) -> dict[str, AirflowHome]:
    """Every side's env and Airflow home, up front: the workloads then alternate sides."""
    server = None
    homes = {}
    for key in keys:
        side = SIDES[key]
        log(f"== preparing {key}: {side.name} ({side.store_label})")
        url = None
        if "postgresql" in (side.backend, side.metadata):
            if server is None:
                server = stack.enter_context(_postgres())
            url = _database(server.url, key)
        side.prepare()
        homes[key] = AirflowHome(side, work / key / "home", url)
        _save(data_path, key, {"describe": _describe(side, homes[key]), "workloads": {}}, run_id)
    return homes


def _database(server_url: str, key: str) -> str:
    """A database of its own per side on the one server (Airflow 3.3 and 3.2 metadata differ)."""
    import psycopg

    name = "versus_" + key.replace("-", "_").replace(".", "_").lower()
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"CREATE DATABASE {name}")
    return server_url.rsplit("/", 1)[0] + "/" + name


def _measure(
    name: str,
    homes: dict[str, AirflowHome],
    runs: int,
    args: argparse.Namespace,
    work: Path,
    invocation: dict[str, Any],
    data_path: Path,
) -> None:
    """Repetition r runs every side once (A, B, ..., then the next repetition in reverse order,
    so drift in the machine's load hits every side alike); then one extra repetition per side
    for each repetition that ran above --max-load."""
    function, full_n, smoke_n, *_ = WORKLOADS[name]
    n = smoke_n if args.smoke else full_n
    repetitions = 1 if name in SINGLE_RUN else runs
    entries: dict[str, dict[str, Any]] = {k: {"n": n, "stores": {}, "results": {}} for k in homes}
    loaded = dict.fromkeys(homes, 0)
    order = list(homes)
    schedule = [order if r % 2 == 0 else order[::-1] for r in range(repetitions)]
    extra = 0
    while schedule:
        sides = schedule.pop(0)
        for key in sides:
            entry = entries[key]
            if "skipped" in entry:
                continue
            rep = len(next(iter(entry["results"].values()), []))
            log(f"{name} on {key}, repetition {rep + 1}")
            meta = {
                "run": invocation["id"],
                "commit": invocation["commit"],
                "at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                "load1": round(os.getloadavg()[0], 2),
            }
            out = work / key / f"{name}-{rep}"
            out.mkdir(parents=True, exist_ok=True)
            try:
                result = function(homes[key], n, 1, out, entry["stores"])
            except Skipped as why:
                entry["skipped"] = str(why)
                result = {}
            except Exception as error:  # one broken workload must not lose the others
                log(f"{name} on {key} FAILED: {error}")
                entry["skipped"] = f"**failed**: {error}"
                result = {}
            meta["load1_end"] = round(os.getloadavg()[0], 2)
            if max(meta["load1"], meta["load1_end"]) > args.max_load:
                loaded[key] += 1
            for metric, measured in result.items():
                entry["results"].setdefault(metric, []).extend({**m, **meta} for m in measured)
            _save(data_path, key, {"workloads": {name: entry}}, invocation["id"])
        if not schedule and extra < args.repeat_loaded and name not in SINGLE_RUN:
            again = [k for k in order if loaded[k] and "skipped" not in entries[k]]
            for k in again:
                loaded[k] -= 1
            if again:
                extra += 1
                log(f"{name}: one more repetition for {again} (load above {args.max_load})")
                schedule.append(again)


def _start_invocation(path: Path, invocation: dict[str, Any]) -> None:
    with _locked(path) as data:
        data.setdefault("invocations", {})[invocation["id"]] = invocation


@contextlib.contextmanager
def _locked(path: Path) -> Any:
    """The .json, read, changed by the caller and written back under a lock."""
    import fcntl

    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    lock_path = Path(tempfile.gettempdir()) / f"versus-{key}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(path.read_text()) if path.exists() else {"sides": {}}
        yield data
        path.write_text(json.dumps(data, indent=1) + "\n")


def _save(path: Path, key: str, record: dict[str, Any], run_id: str) -> None:
    """Merge one side's description and workloads into the .json; a workload measured again
    replaces the old figures of that side (each keeps its own invocation id)."""
    with _locked(path) as data:
        old = data["sides"].get(key, {})
        workloads = {**old.get("workloads", {}), **record.get("workloads", {})}
        data["sides"][key] = {**old, **record, "workloads": workloads, "run": run_id}


def _sections(data: dict[str, Any]) -> list[Section]:
    """One section per workload, sides in the order of SIDES."""
    order = list(SIDES)
    sides = sorted(
        ((k, v) for k, v in data["sides"].items() if k in SIDES), key=lambda kv: order.index(kv[0])
    )
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
            if entry.get("results"):
                section.results[side] = entry["results"]
                section.stores[side] = entry["stores"]
        sections.append(section)
    return sections


def _postgres() -> Any:
    """A throwaway server from the tests' harness (127.0.0.1, free port, removed after), with
    fsync on: the bench compares durable commits, as production runs them."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("versus_postgres_server", POSTGRES_HARNESS)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {POSTGRES_HARNESS}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.running_server(fsync=True)


def _describe(side: Side, home: AirflowHome) -> dict[str, str]:
    import sqlite3
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
    metadata = side.metadata_label
    if side.metadata == "sqlite":  # what Airflow's file really uses (it sets WAL on connect)
        with sqlite3.connect(home.db) as conn:
            journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
        metadata += f" (journal_mode={journal})"
    return {
        "name": side.name,
        "versions": out.stdout.strip() or out.stderr.strip()[-200:],
        "metadata": metadata,
        "store": side.store_label,
        "env": str(side.env),
    }


if __name__ == "__main__":
    sys.exit(main())
