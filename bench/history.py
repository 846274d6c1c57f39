"""History's cost: `set` and `get` p50 with history on (default settings: 20 versions per key)
vs off, on SQLite and PostgreSQL, each pair in the same process, interleaved round by round;
then `get(as_of=...)` p50/p99 on a key with 10,000 kept versions, beside a plain `get` of the
same key in the same loop (so a p99 the machine's load makes is seen as such). On SQLite a
third side, "explicit", runs the explicit path of a versioned `set` (BEGIN IMMEDIATE, the
write, the version, the trim, COMMIT: what every write but `set` does) instead of the
versioning trigger. PostgreSQL: a server the test harness starts. Before/after a change across
two source trees: bench/history_ab.py.

    .venv/bin/python bench/history.py [--ops 2000] [--rounds 5] [--versions 10000]

Prints the load (os.getloadavg), row counts and the ratios; no assertion (never in CI).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.postgres_server import running_server

from taskstate import StateStore, TaskScope, TaskStateStore
from taskstate.backends.base import Stamp
from taskstate.settings import Settings

KEYS = 100  # each key is rewritten ops/KEYS times per round: history trims as it goes


def _times(fn: Callable[[int], object], ops: int) -> tuple[list[float], list[float]]:
    """Each call's wall clock and this thread's CPU (on SQLite, all of the call's work)."""
    times, cpu = [], []
    for i in range(ops):
        t0, c0 = time.perf_counter(), time.thread_time()
        fn(i)
        times.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
    return times, cpu


def _store(url: str, versions: int) -> StateStore:
    return StateStore(url, settings=dataclasses.replace(Settings(), history_versions=versions))


def _explicit(store: StateStore) -> StateStore:
    """`store` whose versioned `set` takes the explicit statements, not the trigger: its stamp
    is one ulp later than the row's time, which the backend reads as "not the row as written"."""
    backend = store.backend
    plain = backend.set

    def set_(namespace: str, key: str, value: str, expires_at: float | None, now: float,
             updated_by: str | None = None, stamp: Stamp | None = None) -> None:  # fmt: skip
        later = None if stamp is None else stamp._replace(at=math.nextafter(now, math.inf))
        plain(namespace, key, value, expires_at, now, updated_by, later)  # type: ignore[call-arg]

    backend.set = set_  # type: ignore[method-assign]
    return store


def on_vs_off(name: str, url: str, ops: int, rounds: int) -> None:
    sides = [("on", 20, False), ("off", 0, False)]
    if name == "sqlite":
        sides.insert(1, ("explicit", 20, True))
    states: dict[str, TaskStateStore] = {}
    for side, versions, explicit in sides:
        store = _store(url, versions)
        store = _explicit(store) if explicit else store
        states[side] = store.task_state(TaskScope("bench", side, "task"))
    ops_timed = ("set", "get", "set CPU") if name == "sqlite" else ("set", "get")
    p50s = {side: {op: list[float]() for op in ops_timed} for side in states}
    for _ in range(rounds):
        for side, state in states.items():
            sets, sets_cpu = _times(lambda i, s=state: s.set(f"k{i % KEYS}", {"n": i}), ops)
            gets, _ = _times(lambda i, s=state: s.get(f"k{i % KEYS}"), ops)
            p50s[side]["set"].append(statistics.median(sets))
            p50s[side]["get"].append(statistics.median(gets))
            if name == "sqlite":
                p50s[side]["set CPU"].append(statistics.median(sets_cpu))
    for op in ops_timed:
        off = statistics.median(p50s["off"][op])
        for side in states:
            if side != "off" and (op != "get" or side == "on"):
                on = statistics.median(p50s[side][op])
                print(
                    f"{name} {op}: p50 {side} {on * 1e6:.1f} us, off {off * 1e6:.1f} us, "
                    f"ratio {on / off:.2f}x"
                )


def as_of(name: str, url: str, versions: int) -> None:
    clock = [1_000_000.0]
    settings = dataclasses.replace(Settings(), history_versions=versions)
    store = StateStore(url, settings=settings, clock=lambda: clock[0])
    state = store.task_state(TaskScope("bench", "as_of", "task"))
    for i in range(versions):
        clock[0] += 1
        state.set("cursor", i)
    rng = random.Random(7)
    instants = [
        datetime.fromtimestamp(1_000_000.5 + rng.randrange(versions), timezone.utc)
        for _ in range(1000)
    ]
    past: list[float] = []
    plain: list[float] = []
    past_cpu: list[float] = []  # this thread's CPU: on SQLite all of it, waiting for a CPU not
    for at in instants:  # interleaved: both see the same moments of load
        t0, c0 = time.perf_counter(), time.thread_time()
        state.get("cursor", as_of=at)
        t1, c1 = time.perf_counter(), time.thread_time()
        state.get("cursor")
        past.append(t1 - t0)
        past_cpu.append(c1 - c0)
        plain.append(time.perf_counter() - t1)
    measured = [("get(as_of=)", sorted(past)), ("plain get", sorted(plain))]
    if name == "sqlite":
        measured.append(("get(as_of=) thread CPU", sorted(past_cpu)))
    for what, times in measured:
        p50, p99 = times[len(times) // 2], times[int(len(times) * 0.99)]
        print(
            f"{name} {what} on a key with {versions} versions: "
            f"p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--versions", type=int, default=10000)
    args = parser.parse_args()
    load = os.getloadavg()
    print(
        f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; 1 thread; {KEYS} keys; "
        f"{args.ops} ops x {args.rounds} rounds per side, interleaved"
    )
    sqlite_url = f"sqlite:///{tempfile.mkdtemp()}/bench.db"
    on_vs_off("sqlite", sqlite_url, args.ops, args.rounds)
    as_of("sqlite", sqlite_url, args.versions)
    with running_server() as server:
        _store(server.url, 0).migrate()
        on_vs_off("postgres", server.url, args.ops, args.rounds)
        as_of("postgres", server.url, args.versions)


if __name__ == "__main__":
    main()
