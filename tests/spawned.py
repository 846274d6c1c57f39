"""What the tests' `spawn`ed processes run (a fresh interpreter, as a separate worker is). A
spawned child imports the module its target lives in: a test module's imports (hypothesis, the
servers' helpers...) cost each child over a CPU second before it wrote anything. Here only
taskstate's are imported."""

from __future__ import annotations

from multiprocessing.synchronize import Event
from typing import Any

from taskstate import StateStore, TaskScope
from taskstate.settings import Settings


def migrate(url: str) -> list[int]:
    from taskstate.backends.postgres import PostgresBackend  # the SQLite writers need no driver

    return PostgresBackend(url).migrate()


def increment(url: str, n: int) -> None:
    with StateStore(url) as store:
        accessor = store.task_state(TaskScope("dag", "run", "task"))
        for _ in range(n):
            accessor.update("counter", lambda v: v + 1, default=0)


def write_forever(url: str, acks: str, stop: Event) -> None:
    """Set k0, k1, ... and record each one only after `set` returned."""
    with StateStore(url) as store, open(acks, "a", buffering=1) as log:
        accessor = store.task_state(TaskScope("dag", "run", "writer"))
        i = 0
        while not stop.is_set():
            accessor.set(f"k{i}", {"i": i, "pad": "x" * 100})
            log.write(f"{i}\n")
            i += 1


def count_up(url: str, acks: str, stop: Event) -> None:
    """`update` +1 in a loop, recording each increment only after it returned."""
    with StateStore(url) as store, open(acks, "a", buffering=1) as log:
        accessor = store.task_state(TaskScope("dag", "run", "counter"))
        while not stop.is_set():
            accessor.update("n", lambda v: v + 1, default=0)
            log.write("1\n")


def write_while(url: str, stop: Any, writes: Any, report: Any) -> None:
    """`set` task state in a loop until told to stop, counting the writes in `writes`."""
    with StateStore(url, settings=Settings()) as store:
        acc = store.task_state(TaskScope("writer", "run", "task"))
        n = 0
        while not stop.is_set():
            acc.set(f"k{n % 100}", {"n": n})
            n += 1
            writes.value = n
        report.put((n, acc.get(f"k{(n - 1) % 100}")))
