"""Providers' `durable=True` on Airflow 3.2: jobs per logical job with and without
`[state_store] taskstate_provider_durable`.

Two real deployments side by side (api-server, dag-processor, scheduler + LocalExecutor, one
with the setting on, one with it off), each against its own moto server on loopback
(tests/aws_server.py), run tests/airflow/provider_dags/ts_provider_durable.py in turn: Amazon's
`RedshiftDataOperator` and `GlueJobOperator` (apache-airflow-providers-amazon from PyPI), try 1
of each task SIGKILLed after the job id is saved, while polling, or inside the submit→persist
window (the job accepted, its id not saved yet). A logical job is one task of one DAG run; the
service's ledger says how many jobs it accepted for each.

    .venv/bin/python bench/provider_durable.py [--runs 3]

With `--ours`: taskstate.providers' operators (Athena, Batch, ECS, dbt Cloud, Airbyte) against
the providers' own classes, in one deployment of Airflow 3.2 (LocalExecutor), runs of two DAGs
of tests/airflow/provider_dags/ts_providers_ours.py (`ts_providers_ours_kills`,
`ts_providers_upstream`) interleaved, try 1 of every task SIGKILLed inside the submit→persist
window, after the id is saved, or while polling, against moto (tests/aws_server.py) and the
dbt Cloud / Airbyte fakes (tests/job_services.py).

Prints a markdown table (pasted into bench/README.md). Not part of the test suite.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]

from record import meta, save  # noqa: E402
from tests.aws_server import running_aws  # noqa: E402
from tests.job_services import running_services  # noqa: E402
from versus.envs import AirflowHome, Side  # noqa: E402
from versus.scheduler import Deployment  # noqa: E402

DAG = REPO / "tests" / "airflow" / "provider_dags" / "ts_provider_durable.py"
FAULTS = ("after_persist", "while_polling", "in_window")
OPERATORS = ("redshift", "glue")


def jobs_per_logical_job(ledger: list[dict[str, str]]) -> Counter[tuple[str, str]]:
    """(DAG run, task) -> jobs the service accepted for it."""
    return Counter(tuple(entry["logical"].split("|", 1)) for entry in ledger)  # type: ignore[misc]


OURS_DAG = REPO / "tests" / "airflow" / "provider_dags" / "ts_providers_ours.py"
OURS_OPERATORS = ("athena", "batch", "ecs", "dbt_cloud", "airbyte")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="DAG runs per side")
    parser.add_argument("--ours", action="store_true", help="taskstate.providers vs upstream")
    args = parser.parse_args()
    if args.ours:
        ours(args.runs)
        return
    started = meta()
    side = Side("provider durable 3.2", "3.2", taskstate=True)
    side.prepare()
    tasks = [f"{op}_{fault}" for op in OPERATORS for fault in FAULTS]
    reports: dict[bool, list[dict[str, object]]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        live: dict[bool, tuple[Deployment, object]] = {}
        for on in (True, False):
            root = Path(tmp) / ("on" if on else "off")
            root.mkdir()
            home = AirflowHome(side, root / "home")
            (home.root / "dags" / "versus_dags.py").unlink()
            shutil.copy(DAG, home.root / "dags")
            aws = stack.enter_context(running_aws(root))
            out = root / "out"
            out.mkdir()
            extra = {
                "AIRFLOW_CONN_AWS_DEFAULT": aws.airflow_connection(),
                "AIRFLOW__STATE_STORE__TASKSTATE_PROVIDER_DURABLE": str(on),
                "TS_PROVIDER_FAULT": "kill",
                "TS_PROVIDER_FAULTS": ",".join(FAULTS),
            }
            live[on] = (stack.enter_context(Deployment(home, out, extra)), aws)
        for _ in range(args.runs):  # interleaved: one run with the setting, one without
            for on in (True, False):
                deployment, _aws = live[on]
                reports[on] += deployment.run("ts_provider_durable", tasks=len(tasks))
        jobs = {on: jobs_per_logical_job(aws.submissions()) for on, (_d, aws) in live.items()}
    print(f"\n{args.runs} DAG runs per side, Airflow 3.2, {len(tasks)} tasks per run\n")
    print("| try 1 SIGKILLed | operator | jobs per logical job, on | off (baseline) | on/off |")
    print("|---|---|--:|--:|--:|")
    figures: dict[str, object] = {"runs": args.runs}
    for fault in FAULTS:
        for op in OPERATORS:
            task = f"{op}_{fault}"
            means = []
            cells = []
            for on in (True, False):
                counts = [n for (_run, t), n in jobs[on].items() if t == task]
                means.append(sum(counts) / len(counts))
                cells.append(f"{means[-1]:.2f} (max {max(counts)})")
            print(f"| {fault} | {op} | {cells[0]} | {cells[1]} | {means[0] / means[1]:.2f}× |")
            figures[task] = {"on_mean": means[0], "off_mean": means[1], "cells": cells}
    totals = {on: sum(jobs[on].values()) for on in (True, False)}
    print(
        f"\njobs: {totals[True]} with the setting, {totals[False]} without, for "
        f"{len(jobs[True])} logical jobs each ({totals[True] / totals[False]:.2f}×)"
    )
    figures["jobs"] = {"on": totals[True], "off": totals[False], "logical": len(jobs[True])}
    save("provider_durable", figures, command=f"bench/provider_durable.py --runs {args.runs}",
         started=started)  # fmt: skip


def ours(runs: int) -> None:
    """taskstate.providers' classes against the providers' own, same deployment, interleaved."""
    started = meta()
    side = Side("taskstate.providers 3.2", "3.2", taskstate=True)
    side.prepare()
    tasks = [f"{op}_{fault}" for op in OURS_OPERATORS for fault in FAULTS]
    sides = {True: "ts_providers_ours_kills", False: "ts_providers_upstream"}
    run_ids: dict[bool, list[str]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        root = Path(tmp)
        home = AirflowHome(side, root / "home")
        (home.root / "dags" / "versus_dags.py").unlink()
        shutil.copy(OURS_DAG, home.root / "dags")
        out = root / "out"
        out.mkdir()
        aws = stack.enter_context(running_aws(root, job_seconds=4))
        fakes = stack.enter_context(running_services(root, job_seconds=4))
        services = {
            "aws": aws.endpoint, "dbt": fakes.dbt_host, "airbyte": fakes.airbyte_url,
            "ca": str(fakes.ca_bundle), "out": str(out),
        }  # fmt: skip
        extra = {"TS_SERVICES": json.dumps(services), "TS_PROVIDERS_UPSTREAM": "1"}
        deployment = stack.enter_context(Deployment(home, out, extra))
        for _ in range(runs):  # interleaved: one run with taskstate's classes, one without
            for with_ours, dag_id in sides.items():
                reports = deployment.run(dag_id, tasks=len(tasks))
                run_ids[with_ours].append(str(reports[0]["run_id"]))
        ledger = aws.submissions() + fakes.submissions()
    jobs: dict[bool, Counter[tuple[str, str]]] = {}
    for with_ours, ids in run_ids.items():
        jobs[with_ours] = Counter(
            (run, task)
            for run, _, task in (str(e["logical"]).partition("|") for e in ledger)
            if run in ids
        )
    load = os.getloadavg()
    print(
        f"\n{runs} DAG runs per side, Airflow 3.2 (LocalExecutor), {len(tasks)} tasks per run, "
        f"load {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f} on {os.cpu_count()} cores\n"
    )
    print("| try 1 SIGKILLed | operator | jobs per logical job, taskstate.providers | upstream |")
    print("|---|---|--:|--:|")
    figures: dict[str, object] = {"runs": runs, "load": list(load)}
    for fault in FAULTS:
        for op in OURS_OPERATORS:
            task = f"{op}_{fault}"
            cells = []
            for with_ours in (True, False):
                counts = [jobs[with_ours][(run, task)] for run in run_ids[with_ours]]
                cells.append(f"{sum(counts) / len(counts):.2f} (max {max(counts)})")
            print(f"| {fault} | {op} | {cells[0]} | {cells[1]} |")
            figures[task] = {"ours": cells[0], "upstream": cells[1]}
    totals = {w: sum(jobs[w].values()) for w in (True, False)}
    logical = runs * len(tasks)
    print(
        f"\njobs: {totals[True]} with taskstate.providers, {totals[False]} with the providers' "
        f"classes, for {logical} logical jobs each"
    )
    figures["jobs"] = {"ours": totals[True], "upstream": totals[False], "logical": logical}
    command = f"bench/provider_durable.py --ours --runs {runs}"
    save("provider_durable_ours", figures, command=command, started=started)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
