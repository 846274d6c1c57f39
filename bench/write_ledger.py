"""What the write ledger costs a conditional write over HTTP: `PUT If-Match` to `taskstate
serve` without a write id (nothing recorded: the path as it was before the ledger) and with one
(looked up once the key is locked, recorded in the write's transaction), interleaved request
by request on one keep-alive connection each, in one process, against one server per store:
SQLite, and PostgreSQL (its own instance, directly). Not in CI.

    .venv/bin/python bench/write_ledger.py [--n 2000] [--plain]

`--plain`: the same for a plain PUT (no If-Match), what `set` sends: without a write id (one
upsert, the hot path) and with one (the ledger's path: the key locked, the id looked up and
recorded) — what giving every `set` over HTTP an id would cost.

Each side writes its own key, If-Match the ETag its previous PUT was answered with (so every
PUT applies); the write ids are made before timing. History is on (the default, 20 versions).
`update` over HTTP is a GET and this PUT, so its added cost is the PUT's.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from postgres_ops import paired_percentiles
from record import meta, save
from tests.postgres_server import free_port, running_server

from taskstate import StateStore

PATH = "/taskstate/api/v2/dags/bench/dagRuns/r/taskInstances/t/state-store/"
BODY = json.dumps({"value": {"cursor": 1, "rows": list(range(10))}}).encode()


@contextmanager
def serving(url: str, root: Path) -> Iterator[int]:
    """`taskstate serve` on `url`'s store (no secret key: no token to verify on either side)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "taskstate", "--url", url, "serve", "--port", str(port),
         "--log-level", "warning"],
        env={**os.environ, "AIRFLOW_HOME": str(root)},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/taskstate/health")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"taskstate serve on {url} did not start")
            time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait()


def conditional_put(
    port: str | int, key: str, ids: list[str] | None, *, plain: bool = False
) -> Callable[[int], None]:
    """PUT number i of `key`, If-Match the previous answer's ETag (`plain`: no If-Match); with
    `ids[i]` as its id."""
    conn = http.client.HTTPConnection("127.0.0.1", int(port))
    headers = {"Content-Type": "application/json", "Authorization": "Bearer t"}
    conn.request("PUT", PATH + key, BODY, headers)
    answer = conn.getresponse()
    answer.read()
    etag = [answer.getheader("etag") or ""]

    def put(i: int) -> None:
        sent = dict(headers) if plain else {**headers, "If-Match": etag[0]}
        if ids is not None:
            sent["X-Taskstate-Write-Id"] = ids[i]
        try:
            conn.request("PUT", PATH + key, BODY, sent)
            response = conn.getresponse()
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            conn.close()  # the server closed the idle keep-alive connection (a loaded machine)
            conn.request("PUT", PATH + key, BODY, sent)
            response = conn.getresponse()
        response.read()
        if response.status != 204:
            raise RuntimeError(f"PUT answered {response.status}")
        etag[0] = response.getheader("etag") or ""

    return put


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--plain", action="store_true", help="a plain PUT (set), not If-Match")
    args = parser.parse_args()
    started = meta()
    figures: dict[str, dict[str, float]] = {}
    root = Path(tempfile.mkdtemp(prefix="ts-write-ledger-"))
    with running_server() as postgres:
        with StateStore(postgres.url) as store:
            store.migrate()
        stores = {"sqlite": f"sqlite:///{root}/served.db", "postgres": postgres.url}
        for name, url in stores.items():
            with serving(url, root) as port:
                ids = [uuid.uuid4().hex for _ in range(args.n)]
                plain = conditional_put(port, "plain", None, plain=args.plain)
                recorded = conditional_put(port, "recorded", ids, plain=args.plain)
                for i in range(min(100, args.n)):  # warm up both sides
                    plain(i)
                    recorded(i)
                ids[:] = [uuid.uuid4().hex for _ in range(args.n)]
                (p50, p95), (r50, r95) = paired_percentiles(plain, recorded, args.n)
                figures[name] = {
                    "no_id_p50_us": p50, "no_id_p95_us": p95, "id_p50_us": r50,
                    "id_p95_us": r95, "ratio_p50": r50 / p50, "ratio_p95": r95 / p95,
                }  # fmt: skip
    load = os.getloadavg()
    what = "plain" if args.plain else "conditional"
    print(f"{what} PUT over HTTP, {args.n} interleaved pairs, history on; load {load[0]:.2f}")
    print("| store | no write id p50 / p95 µs | write id recorded p50 / p95 µs | ratio p50 / p95 |")
    print("|---|---|---|---|")
    for name, f in figures.items():
        print(
            f"| {name} | {f['no_id_p50_us']:.0f} / {f['no_id_p95_us']:.0f} "
            f"| {f['id_p50_us']:.0f} / {f['id_p95_us']:.0f} "
            f"| {f['ratio_p50']:.2f} / {f['ratio_p95']:.2f} |"
        )
    name, flag = ("write_ledger_plain", " --plain") if args.plain else ("write_ledger", "")
    save(name, figures, command=f"bench/write_ledger.py --n {args.n}{flag}", started=started)


if __name__ == "__main__":
    main()
