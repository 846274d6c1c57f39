"""SQLite's read path at 10 M rows (issue 22): where a point read's and a first page's time
goes. Not in CI.

Takes the template stores `scale.py --work DIR` built (10 k and 10 M rows, copied here, never
modified) and measures, every side interleaved in one process, with the load average printed:
- the primary key's b-tree depth and page count in each store (`dbstat`);
- what a point read pays at any size: the statement cache, the per-read transaction, the
  accessor (the raw SELECT against `get`);
- point reads: `get` / `entry` p50 on the 10 k and 10 M copies, through a plain URL and one
  with `?mmap_size=` (the whole file mapped), first cold (pages never touched by this process),
  then after one read of the whole table per connection (every page mapped: a long-lived
  process's steady state, e.g. `taskstate serve`);
- the first page of the 20,000-key task instance against the 1-key one, with a task's writer on
  every row (as rows written by tasks carry): `page()` in the store, and the listing route over
  HTTP (a real uvicorn server on loopback); and the route's body built the way it was before
  (each row decoded, tagged and encoded again) against the way it is now (`wire.entry_json` per
  inline row), same rows, same process.

    .venv/bin/python bench/read_path.py --templates /work/scratch/scale3/sqlite --work DIR
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from record import meta, save
from scale import BIG, NOW, SMALL, scope_of
from tests.api.server import running

from taskstate import StateStore
from taskstate.api.errors import dumps
from taskstate.api.routes_state import _listing
from taskstate.api.serve import standalone_app
from taskstate.backends import sqlite as lite
from taskstate.settings import Settings
from taskstate.wire import EXACT_TOTAL, TASK_ITEMS, TOTAL, task_entry, task_path
from taskstate.writers import task_writer, writer_text

MMAP = 1 << 31  # SQLite's build caps it at 0x7fff0000 (2 GiB - 64 KiB): the 10 M file fits


def p50_us(times: list[float]) -> float:
    return statistics.median(times) * 1e6


def depth(path: Path) -> dict[str, int]:
    """The primary key's levels (root to leaf) and pages, from SQLite's `dbstat`."""
    with sqlite3.connect(path) as conn:
        levels, pages = conn.execute(
            "SELECT max(length(path) - length(replace(path, '/', ''))), count(*) "
            f"FROM dbstat WHERE name = '{lite.TABLE}'"
        ).fetchone()
    return {"levels": int(levels), "pages": int(pages)}


def point_reads(stores: dict[tuple[str, str], tuple[StateStore, int]], n: int) -> dict[str, float]:
    """get / entry p50 (µs) on every store, interleaved: each read goes to every store in turn."""
    rng = random.Random(11)
    times: dict[str, list[float]] = {}
    for _ in range(n):
        for op in ("get", "entry"):
            for (size, how), (store, rows) in stores.items():
                i = rng.randrange(rows)
                i -= i % 100 == 50  # not an offloaded row (no worker backend here)
                scope, key = scope_of(i)
                state = store.task_state(scope)
                read: Callable[[str], object] = state.get if op == "get" else state.entry
                t0 = time.perf_counter()
                read(key)
                times.setdefault(f"{op} {how} {size}", []).append(time.perf_counter() - t0)
    return {name: round(p50_us(t), 2) for name, t in times.items()}


def fixed_costs(copies: dict[str, Path], n: int) -> dict[str, Any]:
    """What a point read pays at any size, interleaved on both stores: the raw primary-key
    SELECT with `sqlite3`'s statement cache (as the backend runs it), without it, inside one
    read transaction held open (no per-read transaction), and `get` through the accessor."""
    sides: dict[tuple[str, str], tuple[Callable[[Any, str], object], int]] = {}
    for size, copy in copies.items():
        rows = 10_000 if size == "10k" else 10_000_000
        for how, cached in (("cached", 64), ("uncached", 0), ("one transaction", 64)):
            conn = sqlite3.connect(copy, isolation_level=None, cached_statements=cached)
            if how == "one transaction":
                conn.execute("BEGIN")
                conn.execute(f"SELECT 1 FROM {lite.TABLE} LIMIT 1").fetchone()

            def raw(scope: Any, key: str, c: sqlite3.Connection = conn) -> object:
                return c.execute(lite._GET, (scope.namespace, key)).fetchone()

            sides[how, size] = (raw, rows)
        store = StateStore(f"sqlite:///{copy}", settings=Settings(), clock=lambda: NOW)
        sides["accessor get", size] = (
            lambda scope, key, s=store: s.task_state(scope).get(key),
            rows,
        )
    rng = random.Random(13)
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(n):
        for side, (read, rows) in sides.items():
            i = rng.randrange(rows)
            i -= i % 100 == 50
            scope, key = scope_of(i)
            t0 = time.perf_counter()
            read(scope, key)
            times.setdefault(side, []).append(time.perf_counter() - t0)
    out: dict[str, Any] = {}
    for how in ("cached", "uncached", "one transaction", "accessor get"):
        small, big = p50_us(times[how, "10k"]), p50_us(times[how, "10M"])
        out[f"{how} us 10k / 10M"] = [round(small, 2), round(big, 2)]
        print(f"fixed   {how:15} 10k {small:6.2f} us  10M {big:6.2f} us  gap {big - small:5.2f} us",
              flush=True)  # fmt: skip
    return out


def ratios(found: dict[str, float], out: dict[str, Any], label: str) -> None:
    for op in ("get", "entry"):
        for how in ("plain", "mmap"):
            small, big = found[f"{op} {how} 10k"], found[f"{op} {how} 10M"]
            out[f"{label} {op} {how} us 10k / 10M"] = [small, big]
            out[f"{label} {op} {how} ratio 10M/10k"] = round(big / small, 2)
            print(f"{label:7} {op:5} {how:5} 10k {small:6.2f} us  10M {big:6.2f} us  "
                  f"{big / small:.2f}x", flush=True)  # fmt: skip


def interleaved(sides: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(rounds):
        for name, fn in sides.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: round(p50_us(t), 1) for name, t in times.items()}


def first_pages(path: Path, rounds: int) -> dict[str, Any]:
    """50 rows against 1, in the store and over HTTP; the route's body before and now."""
    with sqlite3.connect(path) as conn:  # rows written by a task carry its writer
        for scope in (BIG, SMALL):
            by = writer_text(task_writer(scope, try_number=1))
            conn.execute(f"UPDATE {lite.TABLE} SET updated_by = ? WHERE namespace = ?",
                         (by, scope.namespace))  # fmt: skip
    out: dict[str, Any] = {}
    with StateStore(f"sqlite:///{path}", settings=Settings(), clock=lambda: NOW) as store:
        big, small = store.task_state(BIG), store.task_state(SMALL)
        ctx = SimpleNamespace(store=store)

        def before(state: Any) -> bytes:  # the route until now: decode, tag, encode again
            page = state.page(limit=50)
            items = [task_entry(entry) for entry in page.items]
            return dumps({TASK_ITEMS: items, TOTAL: page.total, EXACT_TOTAL: page.exact})

        def now(state: Any) -> bytes:
            return _listing(ctx, state, True, 50, 0, "", False)  # type: ignore[arg-type]

        assert before(big) == now(big) and before(small) == now(small)
        found = interleaved(
            {
                "store page() 50 rows": lambda: big.page(limit=50),
                "store page() 1 row": lambda: small.page(limit=50),
                "route body before, 50 rows": lambda: before(big),
                "route body before, 1 row": lambda: before(small),
                "route body now, 50 rows": lambda: now(big),
                "route body now, 1 row": lambda: now(small),
            },
            rounds,
        )
        with running(standalone_app(store, None)) as base, httpx.Client(base_url=base) as http:
            urls = {
                rows: "/taskstate" + task_path(scope) for rows, scope in (("50", BIG), ("1", SMALL))
            }
            for url in urls.values():
                assert http.get(url).status_code == 200
            found |= interleaved(
                {f"HTTP GET listing, {rows} row(s)": lambda u=url: http.get(u, params={"limit": 50})
                 for rows, url in urls.items()},
                rounds,
            )  # fmt: skip
    for name, us in found.items():
        out[f"{name} us"] = us
        print(f"{name:30} {us:8.1f} us", flush=True)
    for a, b in [("store page() 50 rows", "store page() 1 row"),
                 ("route body before, 50 rows", "route body before, 1 row"),
                 ("route body now, 50 rows", "route body now, 1 row"),
                 ("HTTP GET listing, 50 row(s)", "HTTP GET listing, 1 row(s)")]:  # fmt: skip
        out[f"ratio {a} / 1"] = round(found[a] / found[b], 2)
        print(f"ratio {a:30} / 1 row: {found[a] / found[b]:.2f}x", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--templates", required=True, help="scale.py's --work (s10000.db ...)")
    parser.add_argument("--work", required=True, help="where the copies go (deleted after)")
    parser.add_argument("--reads", type=int, default=3000, help="per store, op and phase")
    parser.add_argument("--rounds", type=int, default=2000, help="first-page rounds")
    parser.add_argument("--out", default="read-path")
    args = parser.parse_args()
    started = meta()
    print(f"load average at start: {os.getloadavg()}", flush=True)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {}
    copies = {size: work / f"read_path_{size}.db" for size in ("10k", "10M")}
    try:
        for size, copy in copies.items():
            shutil.copyfile(
                Path(args.templates) / f"s{10_000 if size == '10k' else 10_000_000}.db", copy
            )
            figures[f"b-tree {size}"] = depth(copy)
            print(size, figures[f"b-tree {size}"], flush=True)
        stores = {}
        for size, copy in copies.items():
            for how, query in (("plain", ""), ("mmap", f"?mmap_size={MMAP}")):
                store = StateStore(
                    f"sqlite:///{copy}{query}", settings=Settings(), clock=lambda: NOW
                )
                stores[size, how] = (store, 10_000 if size == "10k" else 10_000_000)
        figures["fixed costs"] = fixed_costs(copies, args.reads)
        ratios(point_reads(stores, args.reads), figures, "cold")
        for store, _ in stores.values():  # every page read once: mapped, for the mmap side
            store.backend._conn().execute(f"SELECT count(value) FROM {lite.TABLE}").fetchone()  # type: ignore[attr-defined]
        ratios(point_reads(stores, args.reads), figures, "warm")
        for store, _ in stores.values():
            store.close()
        figures["first page"] = first_pages(copies["10k"], args.rounds)
    finally:
        for copy in copies.values():
            for suffix in ("", "-wal", "-shm"):
                Path(f"{copy}{suffix}").unlink(missing_ok=True)
    figures["load_end"] = [round(x, 2) for x in os.getloadavg()]
    save(args.out, figures, command=" ".join(sys.argv), started=started)


if __name__ == "__main__":
    main()
