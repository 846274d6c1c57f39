"""The README's figures, written from the latest bench reports, never by hand.

    .venv/bin/python bench/readme_figures.py --check   # exit 1 if README.md is stale (tested)
    .venv/bin/python bench/readme_figures.py --write   # rewrite the marked passages

Each figure sits between `<!-- figures:NAME -->` and `<!-- /figures:NAME -->` in README.md and
comes from one report: `headline` from bench/RESULTS.json (`make bench`), `kills` from
bench/results/resumable_faults.json, `lint` from bench/results/lint_speed.json, `cleanup`
from bench/results/cleanup_scale.json, `http` from bench/results/http_ops.json, `metrics` from
bench/results/store_ops_metrics.json. A figure the report lacks is left out, not invented.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
README = BENCH.parent / "README.md"
sys.path.insert(0, str(BENCH))

from versus.report import Context, fmt, kept_runs  # noqa: E402


def _load(name: str) -> dict[str, Any]:
    return dict(json.loads((BENCH / name).read_text()))


def _when(record: dict[str, Any]) -> str:
    started = record["started"]
    load = started["load"][0]
    return f"{started['at']}, commit `{started['commit']}`, load average {load:.1f}"


def lint() -> str:
    record = _load("results/lint_speed.json")
    f = record["figures"]
    return (
        f"it lints {f['lint_files_per_s']:,.0f} files/s on one core, where `ast.parse` alone "
        f"manages {f['parse_only_files_per_s']:,.0f} ({f['files']} files, best of "
        f"{f['rounds']}; {_when(record)}; `bench/lint_speed.py`)"
    )


def kills() -> str:
    record = _load("results/resumable_faults.json")
    f = record["figures"]

    def one(name: str) -> int:
        return int(f[name]["working_jobs"].get("1", 0))

    def more(name: str) -> int:
        jobs = f[name]["working_jobs"]
        return int(jobs.get("2", 0)) + int(jobs.get("3", 0))

    n = f["client-token"]["logical_jobs"]
    return (
        f"Under {n} random SIGKILLs it ran exactly one working job for {one('client-token')} of "
        f"{n} logical jobs with a client token and {one('find_job')} of {n} with `find_job`, "
        f"where Airflow 3.3.2's algorithm ran more than one in {more('airflow-3.3.2')} of "
        f"{f['airflow-3.3.2']['logical_jobs']} ({_when(record)})"
    )


def cleanup() -> str:
    record = _load("results/cleanup_scale.json")
    f = record["figures"]
    sqlite, pg = f["backends"]["sqlite"], f["backends"]["postgres"]
    return (
        f"`taskstate clean` deleted {f['rows']:,} expired rows in batches of {f['batch']:,} in "
        f"{sqlite['seconds']:.1f} s on SQLite and {pg['seconds']:.1f} s on PostgreSQL while a "
        f"writer in another process waited at most {sqlite['during_max_ms']:,.0f} ms and "
        f"{pg['during_max_ms']:,.0f} ms for one `set` ({_when(record)}; "
        "`bench/cleanup_scale.py`)"
    )


def http() -> str:
    record = _load("results/http_ops.json")
    f = record["figures"]
    ours, theirs = f["latency"]["taskstate"], f["latency"]["airflow-3.3.2"]

    def versus(op: str) -> str:
        a, b = theirs[f"{op} p50_ms"], ours[f"{op} p50_ms"]
        return f"{b:.2f} ms vs Airflow 3.3.2's {a:.2f} ms ({a / b:.1f}×)"

    clients = record["command"].split("--clients ")[1].split()[0]
    load = f["throughput"]["taskstate"]
    airflow = f["throughput"]["airflow-3.3.2"]
    return (
        f"On one keep-alive connection a `PUT` takes {versus('set')} and a `GET` "
        f"{versus('get')} at p50; {clients} concurrent clients got {load['rps']:,.0f} "
        f"requests/s ({load['errors']} errors, p99 {1000 * load['p99']:.0f} ms) where Airflow "
        f"3.3.2's API served {airflow['rps']:,.0f} ({airflow['errors']} errors) — both servers "
        f"one worker on loopback, SQLite behind them syncing every commit ({_when(record)}; "
        "`bench/http_ops.py`)"
    )


def metrics() -> str:
    record = _load("results/store_ops_metrics.json")
    f = record["figures"]["metrics"]

    def cost(op: str, side: str) -> float:
        return float(f[op][side]["p50_us"] / f[op]["plain"]["p50_us"])

    return (
        f"a `set` costs {cost('set', 'statsd'):.2f}× and a `get` {cost('get', 'statsd'):.2f}× "
        f"an accessor without metrics code with StatsD on, {cost('set', 'off'):.2f}× and "
        f"{cost('get', 'off'):.2f}× with metrics off (p50; {_when(record)}; "
        "`bench/store_ops.py --metrics-only`)"
    )


def headline() -> str:
    data = _load("RESULTS.json")
    invocations = data.get("invocations", {})
    runs = {m.get("run") for m in _measurements(data)}
    if len(runs) != 1:
        raise SystemExit(f"bench/RESULTS.json mixes runs {sorted(map(str, runs))}: re-run it")
    (run_id,) = runs
    inv = invocations[run_id]
    ctx = Context(data["sides"], inv["max_load"], str(run_id), False)

    def median(side: str, workload: str, metric: str, stat: str) -> float | None:
        entry = data["sides"].get(side, {}).get("workloads", {}).get(workload, {})
        measured = entry.get("results", {}).get(metric)
        if not measured:
            return None
        return float(statistics.median(r[stat] for r in kept_runs(ctx, measured)))

    def pair(workload: str, metric: str, a: str, b: str, stat: str = "p50") -> str | None:
        x, y = median(a, workload, metric, stat), median(b, workload, metric, stat)
        if x is None or y is None:
            return None
        return (
            f"{fmt(x)} vs {fmt(y)} (≈ {x / y:,.0f}×)"
            if x / y >= 10
            else (f"{fmt(x)} vs {fmt(y)} ({x / y:.2f}×)")
        )

    clauses = []
    counts: list[int] = []
    for label, a, b in (
        ("SQLite, both WAL with synchronous=FULL: Airflow's metadata DB vs taskstate's file "
         "at `?synchronous=full`", "A", "B-3.2-full"),
        ("taskstate's default file (WAL, synchronous=NORMAL: survives a killed process, not a "
         "power cut) against the same A", "A", "B-3.2"),
        ("PostgreSQL, one server with fsync on: Airflow's metadata DB vs taskstate's backend",
         "A-pg", "B-3.2-pg"),
    ):  # fmt: skip
        parts = [
            f"`{op}` {text}"
            for op in ("set", "get")
            if (text := pair("scheduler", f"task {op}", a, b))
        ]
        for side in (a, b) if parts else ():
            entry = data["sides"][side]["workloads"]["scheduler"]["results"]
            counts += [len(entry[f"task {op}"]) for op in ("set", "get")]
        if parts:
            clauses.append(f"{label} — " + ", ".join(parts))
    etl = pair("etl", "process_records, 10,000 checkpoints", "A", "B-3.2-full", "wall")
    if etl:
        clauses.append(
            f"the skill's `etl_with_checkpoint` over 10,000 records {etl} (SQLite, FULL)"
        )
    deletion = "clean 100,000 expired rows: the deletion, as the command times it"
    for label, a, b in (("SQLite", "A", "B-3.2-full"), ("PostgreSQL", "A-pg", "B-3.2-pg")):
        cleaned = pair("cleanup", deletion, a, b, "wall")
        if cleaned:
            clauses.append(f"deleting 100,000 expired rows ({label}, the deletion alone) {cleaned}")
    crash = data["sides"].get("A", {}).get("workloads", {}).get("crash", {}).get("results", {})
    ours = data["sides"].get("B-3.2", {}).get("workloads", {}).get("crash", {}).get("results", {})
    if crash.get("after_submit") and ours.get("after_submit"):
        a_jobs = statistics.mean(j["jobs"] for j in crash["after_submit"])
        b_jobs = statistics.mean(j["jobs"] for j in ours["after_submit"])
        clauses.append(
            f"with try 1 SIGKILLed between submit and persist, Airflow 3.3.2's mixin created "
            f"{a_jobs:.2f} jobs per logical job where taskstate's created {b_jobs:.2f}"
        )
    low, high = min(counts, default=0), max(counts, default=0)
    reps = str(low) if low == high else f"{low}–{high}"
    done = "" if inv.get("finished") else "; **the run did not finish**, so some rows are missing"
    loads = [max(m.get("load1", 0), m.get("load1_end", 0)) for m in _measurements(data)]
    head = (
        f"Headline (run `{run_id}`, commit `{inv['commit']}`, 2 shared cores, load average "
        f"median {statistics.median(loads):.1f}; medians of {reps} interleaved repetitions"
        f"{done}; full tables in `bench/RESULTS.md`), per-op p50 under a real scheduler + "
        "LocalExecutor: "
    )
    return head + "; ".join(clauses) + "."


def _measurements(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        run
        for side in data["sides"].values()
        for entry in side.get("workloads", {}).values()
        for runs in entry.get("results", {}).values()
        for run in runs
    ]


FIGURES: dict[str, Callable[[], str]] = {
    "headline": headline,
    "kills": kills,
    "lint": lint,
    "cleanup": cleanup,
    "http": http,
    "metrics": metrics,
}


def rendered(text: str) -> str:
    for name, make in FIGURES.items():
        pattern = re.compile(
            rf"(<!-- figures:{name} -->)(.*?)(<!-- /figures:{name} -->)", re.DOTALL
        )
        if not pattern.search(text):
            raise SystemExit(f"README.md has no <!-- figures:{name} --> passage")
        text = pattern.sub(lambda m, make=make: m.group(1) + make() + m.group(3), text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 if README.md is stale")
    mode.add_argument("--write", action="store_true", help="rewrite README.md's figures")
    args = parser.parse_args(argv)
    current = README.read_text()
    wanted = rendered(current)
    if args.write:
        README.write_text(wanted)
        return 0
    if wanted != current:
        print(
            "README.md's figures differ from the latest bench reports: run "
            "`.venv/bin/python bench/readme_figures.py --write`",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
