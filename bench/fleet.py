"""The fleet (tests/fleet.py) measured: workers running the checkpoint loop through HAProxy to
1, 2 and 3 `taskstate serve` replicas, and the same workers on PostgreSQL directly (through
PgBouncer), side by side in one run; then paced at half the closed-loop rate with one fault
of each kind injected, for latency outside the fault windows and the time to recover.

    .venv/bin/python bench/fleet.py [--workers 64] [--seconds 300] [--serve-workers 1]
        [--layouts 1,2,3,direct] [--rounds 1]

The defaults are the issue's size: 64 workers for 10 minutes per layout (5 closed loop, 5
paced with faults), about 45 minutes in all.

One fleet of 3 replicas serves every layout (the balancer sends requests to the first N; the
rest wait in maintenance), so every layout meets the same PostgreSQL, PgBouncer and load.
Closed loop: each layout runs `--seconds / --rounds` at a time, the layouts' order reversed
every round (1 2 3 direct, direct 3 2 1, ...), so the shared machine's load hits all alike.
Paced: each layout at 50% of its own closed-loop record rate while every fault is injected
once (HTTP layouts: all six kinds; direct: PgBouncer and PostgreSQL restarts), for
`--seconds / --rounds` or until `--settle` seconds after the last fault, whichever is later.
Times count from when every worker process has started and made its first call. Every run
is checked (`tests.fleet.check`): 0 acknowledged writes lost, 0 increments applied twice, one
lease holder per round.

An op is one accessor call: `set` (the cursor), `get` (read back at once), `update` (the shared
counter, `update(key, add(1))`: an update operation, so one POST over HTTP that the server
applies in one transaction, and one transaction directly; before, a lambda's GET +
conditional PUT, with one winner per round trip), `cas` (a lease, once per 5 records:
GET + conditional PUT over HTTP). A record is set + get + update (+ cas every 5th). Figures go to
bench/results/fleet.json and are printed as a table; the load average is printed with them.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from record import meta, save
from tests.fleet import FAULTS, Fleet, RunReport, check, drive, running_fleet, unknown_outcomes

PG_FAULTS = ["restart_pgbouncer", "restart_postgres"]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _outside(start: float, report: RunReport) -> bool:
    return not any(f.start - 1 <= start <= f.recovered + 1 for f in report.faults)


def summarise(report: RunReport) -> dict[str, Any]:
    """Records per second, and per op: count, p50/p99 in ms (outside fault windows)."""
    span = report.ended - report.started
    records = sum(w.records for w in report.workers)
    ops: dict[str, dict[str, float]] = {}
    for op in ("set", "get", "update", "cas"):
        times = [
            secs
            for w in report.workers
            for start, secs in w.ops.get(op, [])
            if _outside(start, report)
        ]
        ops[op] = {
            "n": len(times),
            "p50_ms": round(percentile(times, 0.5) * 1000, 1),
            "p99_ms": round(percentile(times, 0.99) * 1000, 1),
        }
    total_ops = sum(len(w.ops.get(op, [])) for w in report.workers for op in ops)
    return {
        "records": records,
        "records_per_s": round(records / span, 1),
        "ops_per_s": round(total_ops / span, 1),
        "ops": ops,
        "errors": sum(len(w.errors) for w in report.workers),
        "unknown_outcomes": unknown_outcomes(report),
        "faults": [
            {
                "kind": f.kind,
                "detail": f.detail,
                "lasted_s": round(f.end - f.start, 1),
                "recovered_after_s": round(f.recovered - f.end, 2),
            }
            for f in report.faults
        ],
        "stale_reads_across_replicas": report.ryw["violations"],
        "ryw_probes": report.ryw["probes"],
    }


def merge(reports: list[RunReport]) -> RunReport:
    workers = [w for r in reports for w in r.workers]
    ryw = {k: sum(r.ryw[k] for r in reports) for k in ("probes", "violations")}
    span = sum(r.ended - r.started for r in reports)  # the time the workers worked, summed
    return RunReport("", workers, [f for r in reports for f in r.faults], ryw, 0.0, span)


class PoolSampler:
    """PgBouncer's client connections (from the replicas or the direct workers) and server
    connections (to PostgreSQL), the most seen, sampled every 200 ms."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.most = {"clients": 0, "servers": 0, "waiting": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PoolSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        assert self.fleet.bouncer is not None
        while not self._stop.wait(0.2):
            try:
                pools = [
                    p for p in self.fleet.bouncer.show("POOLS") if p["database"] != "pgbouncer"
                ]
            except Exception:  # restarting (a fault): no sample
                continue
            now = {
                "clients": sum(p["cl_active"] + p["cl_waiting"] for p in pools),
                "servers": sum(p["sv_active"] + p["sv_idle"] + p["sv_used"] for p in pools),
                "waiting": sum(p["cl_waiting"] for p in pools),
            }
            for k, v in now.items():
                self.most[k] = max(self.most[k], v)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=300, help="closed loop, per layout")
    parser.add_argument("--serve-workers", type=int, default=1, help="processes per replica")
    parser.add_argument("--layouts", default="1,2,3,direct")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--pool-size", type=int, default=8, help="PgBouncer's server pool")
    parser.add_argument("--settle", type=float, default=10.0)
    parser.add_argument("--no-faults", action="store_true")
    args = parser.parse_args()
    layouts = args.layouts.split(",")
    started = meta()
    print(f"load at start {os.getloadavg()} on {os.cpu_count()} cores; {args.workers} workers")
    figures: dict[str, Any] = {
        "workers": args.workers, "seconds_per_layout": args.seconds,
        "serve_workers_per_replica": args.serve_workers, "pgbouncer_pool_size": args.pool_size,
        "layouts": {},
    }  # fmt: skip
    problems: list[str] = []
    with running_fleet(
        replicas=3, serve_workers=args.serve_workers, pool_size=args.pool_size
    ) as fleet:
        assert fleet.bouncer is not None
        closed: dict[str, list[RunReport]] = {name: [] for name in layouts}
        pools: dict[str, dict[str, int]] = {}
        loads: dict[str, list[float]] = {name: [] for name in layouts}
        for rnd in range(args.rounds):
            order = layouts if rnd % 2 == 0 else layouts[::-1]
            for name in order:
                url = _layout(fleet, name)
                with PoolSampler(fleet) as sampler:
                    report = drive(
                        fleet, workers=args.workers, seconds=args.seconds / args.rounds, url=url
                    )
                pools[name] = {
                    k: max(v, pools.get(name, {}).get(k, 0)) for k, v in sampler.most.items()
                }
                loads[name].append(os.getloadavg()[0])
                closed[name].append(report)
                problems += [f"closed {name}: {p}" for p in check(fleet, report)]
                rate = summarise(report)["records_per_s"]
                print(f"closed, {name}: {rate} records/s (load {os.getloadavg()[0]:.1f})")
        for name in layouts:
            summary = summarise(merge(closed[name]))
            summary["pgbouncer_most"] = pools[name]
            summary["load_1min"] = loads[name]
            figures["layouts"][name] = {"closed": summary}
        if not args.no_faults:
            for name in layouts:
                url = _layout(fleet, name)
                rate = figures["layouts"][name]["closed"]["records_per_s"] / 2 / args.workers
                faults = PG_FAULTS if name == "direct" else list(FAULTS)
                report = drive(
                    fleet, workers=args.workers, rate=rate, url=url, faults=faults,
                    seconds=args.seconds / args.rounds, settle=args.settle,
                )  # fmt: skip
                summary = summarise(report)
                summary["paced_records_per_s_per_worker"] = round(rate, 2)
                summary["load_1min"] = os.getloadavg()[0]
                figures["layouts"][name]["paced_with_faults"] = summary
                problems += [f"paced {name}: {p}" for p in check(fleet, report)]
                print(
                    f"paced with faults, {name}: done (load {os.getloadavg()[0]:.1f})", flush=True
                )
    figures["problems"] = problems
    _print(figures)
    command = "bench/fleet.py " + " ".join(sys.argv[1:])
    save("fleet", figures, command=command.strip(), started=started)
    if problems:
        print("INVARIANTS BROKEN:\n  " + "\n  ".join(problems))
        sys.exit(1)


def _layout(fleet: Fleet, name: str) -> str:
    """The URL the workers use for layout `name`: '1'..'3' replicas behind the balancer, or
    'direct' (PostgreSQL through PgBouncer)."""
    assert fleet.bouncer is not None
    if name == "direct":
        return fleet.bouncer.url
    fleet.use(int(name))
    return fleet.url


def _print(figures: dict[str, Any]) -> None:
    print(f"\n{figures['workers']} workers; load now {os.getloadavg()}")
    ms = " p50/p99 ms"
    print(f"| layout | records/s | ops/s | set{ms} | get{ms} | update{ms} | cas{ms} | errors |")
    print("|" + "---|" * 8)
    for phase in ("closed", "paced_with_faults"):
        for name, by_phase in figures["layouts"].items():
            s = by_phase.get(phase)
            if s is None:
                continue
            cells = [
                f"{s['ops'][op]['p50_ms']}/{s['ops'][op]['p99_ms']}"
                for op in ("set", "get", "update", "cas")
            ]
            print(
                f"| {name} {phase} | {s['records_per_s']} | {s['ops_per_s']} | "
                + " | ".join(cells)
                + f" | {s['errors']} |"
            )
    for name, by_phase in figures["layouts"].items():
        s = by_phase.get("paced_with_faults")
        if s:
            rec = ", ".join(f"{f['kind']} {f['recovered_after_s']}s" for f in s["faults"])
            print(
                f"{name} recovery after each fault: {rec}; unknown outcomes {s['unknown_outcomes']}"
            )
        print(f"{name} PgBouncer most: {by_phase['closed'].get('pgbouncer_most')}")


if __name__ == "__main__":
    main()
