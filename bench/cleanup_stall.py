"""A writer's worst `set` while `clean` expires rows on SQLite or PostgreSQL (issue 22): where
the stall comes from. Not in CI.

Copies a store built by `bench/scale.py --work DIR --build-only` (never modifies it), starts a
writer process (task state with history, as `bench/scale.py` does), waits 10 s (the control:
its worst `set` alone), then runs cleanup's phases one after another and reports the writer's
worst and p50 `set` during each: the expiry (`delete_expired`, paced batches), the history
pruning that follows it, and the whole. Variants run in turn, interleaved over `--repeat`
rounds, each on a fresh copy, with the load average printed.

    .venv/bin/python bench/cleanup_stall.py --template /work/scratch/scale3/sqlite/s1000000.db

PostgreSQL: `--template pg:DIR/pg/s1000000` names a database of a kept cluster (`scale.py
--work DIR` keeps one in DIR/pg; the cluster is started here, so no other run may use it), and
`--pg-settings test|production` the server's settings (tests/postgres_server.py); each run is
on a `CREATE DATABASE ... TEMPLATE` copy, dropped after.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg
from record import meta, save
from scale import p50, start_writer, worst
from tests.postgres_server import PROFILES, running_server

from taskstate import StateStore, cleanup
from taskstate.cleanup import delete_expired, prune_versions
from taskstate.settings import Settings

VARIANTS: dict[str, Any] = {}
TARGET_S = cleanup.BATCH_TARGET_S
PRUNE: list[Any] = [prune_versions]  # what a run prunes with (a variant may swap it)


def variant(name: str):  # type: ignore[no-untyped-def]
    def register(fn):  # type: ignore[no-untyped-def]
        VARIANTS[name] = fn
        return fn

    return register


@variant("as is")
def _as_is(store: StateStore) -> None:
    cleanup.BATCH_TARGET_S = TARGET_S


@variant("unpaced pruning")
def _unpaced_pruning(store: StateStore) -> None:
    """Pruning as before it was paced: the batch size asked for, batch after batch at once."""
    cleanup.BATCH_TARGET_S = TARGET_S

    def unpaced(backend: Any, *, keep: int, before: float | None, batch_size: int, **_: Any) -> int:
        pruned, after = 0, None
        while True:
            n, after = backend.prune_versions(keep, before, batch_size, after)
            pruned += n
            if after is None:
                return pruned

    PRUNE[0] = unpaced


@variant("20 ms batches")
def _smaller(store: StateStore) -> None:
    cleanup.BATCH_TARGET_S = 0.02


Copier = Callable[[], "contextlib.AbstractContextManager[str]"]


def sqlite_copies(template: Path, scratch: Path) -> Copier:
    @contextlib.contextmanager
    def copy() -> Iterator[str]:
        db = scratch / "stall.db"

        def remove() -> None:
            for suffix in ("", "-wal", "-shm"):
                (db.parent / (db.name + suffix)).unlink(missing_ok=True)

        remove()
        shutil.copy(template, db)
        try:
            yield f"sqlite:///{db}"
        finally:
            remove()

    return copy


def postgres_copies(admin_url: str, template: str) -> Copier:
    @contextlib.contextmanager
    def copy() -> Iterator[str]:
        fresh = f"{template}_copy_{uuid.uuid4().hex[:6]}"
        with psycopg.connect(admin_url, autocommit=True) as admin:  # FILE_COPY: see scale.py
            admin.execute(f"CREATE DATABASE {fresh} TEMPLATE {template} STRATEGY FILE_COPY")
        try:
            yield admin_url.rsplit("/", 1)[0] + "/" + fresh
        finally:
            with psycopg.connect(admin_url, autocommit=True) as admin:
                admin.execute(f"DROP DATABASE IF EXISTS {fresh} WITH (FORCE)")

    return copy


def run_one(copies: Copier, setup: Any, batch_size: int) -> dict[str, Any]:
    with copies() as url:
        return _run_one(url, setup, batch_size)


def _run_one(url: str, setup: Any, batch_size: int) -> dict[str, Any]:
    with StateStore(url, settings=Settings()) as store:
        store.backend.migrate()
    proc, stop, receive = start_writer(url)
    marks: dict[str, float] = {}
    load = os.getloadavg()[0]
    try:
        time.sleep(1.0)
        marks["alone"] = time.time()
        time.sleep(10.0)
        marks["alone end"] = time.time()
        with StateStore(url, settings=Settings()) as store:
            PRUNE[0] = prune_versions
            setup(store)
            marks["expire"] = time.time()
            result = delete_expired(
                store.backend, store.clock(), batch_size=batch_size, history=bool(store.history)
            )
            marks["prune"] = time.time()
            pruned = PRUNE[0](store.backend, keep=store.history, before=None, batch_size=batch_size)
            marks["end"] = time.time()
        time.sleep(0.5)
    finally:
        stop.set()
    samples = receive.recv()
    proc.join()
    out: dict[str, Any] = {
        "load": round(load, 1),
        "expired rows": result.deleted,
        "batches": result.batches,
        "longest batch ms": round(result.longest_batch_s * 1000, 1),
        "expire s": round(marks["prune"] - marks["expire"], 1),
        "prune s": round(marks["end"] - marks["prune"], 1),
        "versions pruned": pruned,
    }
    for phase, (a, b) in {
        "alone": ("alone", "alone end"),
        "expire": ("expire", "prune"),
        "prune": ("prune", "end"),
    }.items():
        during = [lat for at, lat in samples if marks[a] <= at <= marks[b]]
        out[f"{phase} worst set ms"] = round(worst(during) * 1000, 1)
        out[f"{phase} p50 set ms"] = round(p50(during) * 1000, 2)
        out[f"{phase} sets"] = len(during)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--template", required=True, help="a SQLite file, or pg:CLUSTER_DIR/DATABASE"
    )
    parser.add_argument("--pg-settings", default="test", choices=PROFILES)
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/taskstate-stall"))
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=10_000)
    parser.add_argument("--out", default="cleanup-stall")
    args = parser.parse_args()
    started = meta()
    args.scratch.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {"template": args.template, "batch size": args.batch_size}
    with contextlib.ExitStack() as stack:
        if args.template.startswith("pg:"):
            cluster, database = args.template[3:].rsplit("/", 1)
            server = stack.enter_context(
                running_server(root=Path(cluster), profile=args.pg_settings)
            )
            copies = postgres_copies(server.url, database)
            figures["server settings"] = server.settings
        else:
            copies = sqlite_copies(Path(args.template), args.scratch)
        for r in range(args.repeat):
            for name in args.variants.split(","):
                got = run_one(copies, VARIANTS[name], args.batch_size)
                print(name, r, got, flush=True)
                figures[f"{name} #{r + 1}"] = got
    print(save(args.out, figures, command=" ".join(sys.argv), started=started))


if __name__ == "__main__":
    main()
