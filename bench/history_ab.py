"""History's cost before and after a change: `set` / `get` p50 with history on (default: 20
versions per key) and off, for two source trees (say `main` and a branch), on SQLite and on a
PostgreSQL server the test harness starts. Each tree runs in its own worker process (one
`taskstate` per interpreter) with its own SQLite file and PostgreSQL database at its own schema;
the workers take turns round by round, so both see the same moments of load, and each reports
its on/off ratio from its own process. Within a worker, one backend after the other, history
on and off take turns one operation at a time. `--fsync` runs the PostgreSQL server at its
default durability (fsync on: each COMMIT waits for its WAL on disk) instead of the harness's
fsync off; both sides of a ratio always run on the same server.

    .venv/bin/python bench/history_ab.py --before /work/main/src [--after src] [--ops 1000]
        [--rounds 5] [--fsync] [--profile test|production]

On SQLite each side also reports `set`'s p50 in the thread's CPU (time.thread_time: SQLite's
statement, commit and WAL writes all run on the calling thread), which a loaded machine's
waiting for a CPU does not move.

Prints the load (os.getloadavg) at the start and the end; no assertion (never in CI).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KEYS = 100  # each key is rewritten ops/KEYS times per round: history trims as it goes


def worker(src: str, sqlite_url: str, postgres_url: str) -> None:
    """Serve rounds on stdin ("<ops>" per line): one JSON line of p50s per round."""
    sys.path.insert(0, src)
    from taskstate import StateStore, TaskScope  # the tree under test's
    from taskstate.settings import Settings

    states = {}
    for backend, url in (("sqlite", sqlite_url), ("postgres", postgres_url)):
        for side, versions in (("on", 20), ("off", 0)):
            settings = dataclasses.replace(Settings(), history_versions=versions)
            store = StateStore(url, settings=settings)
            store.migrate()
            states[f"{backend} {side}"] = store.task_state(TaskScope("bench", side, "task"))
    for line in sys.stdin:
        ops = int(line)
        sets: dict[str, list[float]] = {name: [] for name in states}
        gets: dict[str, list[float]] = {name: [] for name in states}
        cpu: dict[str, list[float]] = {name: [] for name in states}
        # One backend after the other; within one, on and off take turns one operation at a
        # time (a PostgreSQL flush at fsync on, or another session's burst, lands on both
        # sides alike; the other backend's calls in between would cool both sides' caches).
        for backend in ("sqlite", "postgres"):
            pair = [(name, state) for name, state in states.items() if name.startswith(backend)]
            for i in range(ops):
                for name, state in pair:
                    t0, c0 = time.perf_counter(), time.thread_time()
                    state.set(f"k{i % KEYS}", {"n": i})
                    sets[name].append(time.perf_counter() - t0)
                    cpu[name].append(time.thread_time() - c0)
            for i in range(ops):
                for name, state in pair:
                    t0 = time.perf_counter()
                    state.get(f"k{i % KEYS}")
                    gets[name].append(time.perf_counter() - t0)
        p50s = {}
        for name in states:
            p50s[f"{name} set"] = statistics.median(sets[name])
            p50s[f"{name} set cpu"] = statistics.median(cpu[name])
            p50s[f"{name} get"] = statistics.median(gets[name])
        print(json.dumps(p50s), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", required=True, help="the source tree (its src/) before")
    parser.add_argument("--after", default=str(ROOT / "src"))
    parser.add_argument("--ops", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--fsync", action="store_true", help="PostgreSQL at its default durability (fsync on)"
    )
    parser.add_argument("--profile", default="test", help="PostgreSQL settings (PROFILES)")
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    sys.path.insert(0, str(ROOT))
    import psycopg
    from tests.postgres_server import running_server

    trees = {"before": args.before, "after": args.after}
    load = os.getloadavg()
    print(
        f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; 1 thread per worker; {KEYS} keys; "
        f"{args.ops} ops x {args.rounds} rounds per side; workers take turns each round; "
        f"PostgreSQL fsync {'on' if args.fsync else 'off'}, profile {args.profile}"
    )
    with running_server(fsync=args.fsync, profile=args.profile) as server:
        workers = {}
        for name, src in trees.items():
            with psycopg.connect(server.url, autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE ab_{name}")
            postgres_url = server.url.rsplit("/", 1)[0] + f"/ab_{name}"
            sqlite_url = f"sqlite:///{tempfile.mkdtemp()}/ab.db"
            command = [sys.executable, __file__, "--before", "-", "--worker", src, sqlite_url,
                       postgres_url]  # fmt: skip
            workers[name] = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
        rounds: dict[str, list[dict[str, float]]] = {name: [] for name in workers}
        for _ in range(args.rounds):
            for name, proc in workers.items():
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(f"{args.ops}\n")
                proc.stdin.flush()
                rounds[name].append(json.loads(proc.stdout.readline()))
        for proc in workers.values():
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait()
    for name, found in rounds.items():
        p50 = {what: statistics.median(r[what] for r in found) for what in found[0]}
        for backend in ("sqlite", "postgres"):
            line = [f"{name:6} {backend:8}"]
            for op in ("set", "get"):
                on, off = p50[f"{backend} on {op}"], p50[f"{backend} off {op}"]
                line.append(f"{op} on {on * 1e6:.1f} / off {off * 1e6:.1f} us = {on / off:.2f}x")
            if backend == "sqlite":  # all of it runs on the calling thread: its CPU is the cost
                on, off = p50["sqlite on set cpu"], p50["sqlite off set cpu"]
                line.append(f"set CPU {on * 1e6:.1f} / {off * 1e6:.1f} us = {on / off:.2f}x")
            print("; ".join(line))
    load = os.getloadavg()
    print(f"load at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
