"""History's cost on the hot path (SQLite): `set` and `get` p50 with history on (default
settings, 20 versions) vs off, in the same process, interleaved round by round.

    .venv/bin/python bench/history.py [--ops 2000] [--rounds 5]

Prints the load (os.getloadavg), row counts and the ratios; no assertion (never in CI).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
import time

from taskstate import StateStore, TaskScope
from taskstate.settings import Settings


def _p50(fn, ops: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for i in range(ops):
        t0 = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    root = tempfile.mkdtemp()
    states = {}
    for name, versions in (("on", 20), ("off", 0)):
        settings = dataclasses.replace(Settings(), history_versions=versions)
        store = StateStore(f"sqlite:///{root}/{name}.db", settings=settings)
        states[name] = store.task_state(TaskScope("bench", "run", "task"))
    results: dict[str, dict[str, list[float]]] = {side: {"set": [], "get": []} for side in states}
    keys = 100  # each key is rewritten ops/keys times: history trims as it goes
    for _ in range(args.rounds):
        for side, state in states.items():
            results[side]["set"].append(
                _p50(lambda i, s=state: s.set(f"k{i % keys}", {"n": i}), args.ops)
            )
            results[side]["get"].append(_p50(lambda i, s=state: s.get(f"k{i % keys}"), args.ops))
    load = os.getloadavg()
    print(
        f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; 1 thread; {keys} keys; "
        f"{args.ops} ops x {args.rounds} rounds per side, interleaved"
    )
    for op in ("set", "get"):
        on = statistics.median(results["on"][op])
        off = statistics.median(results["off"][op])
        print(f"{op}: p50 on {on * 1e6:.1f} us, off {off * 1e6:.1f} us, ratio {on / off:.2f}x")


if __name__ == "__main__":
    main()
