"""Set/get p50/p95 of a 1 MB value through the offload backend (file://), against the same bytes
written and read as a plain file in the same process (the floor for any file-backed store).

    .venv/bin/python bench/offload.py [--n 200] [--mb 1]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from record import meta, save

from taskstate import StateStore, TaskScope
from taskstate.backends.offload import OffloadBackend
from taskstate.settings import Settings
from taskstate.values import encode_value


def paired(
    a: Callable[[int], object], b: Callable[[int], object], n: int
) -> tuple[tuple[float, float], tuple[float, float]]:
    """p50/p95 (ms) of `a` and `b`, alternating call by call."""
    samples: tuple[list[float], list[float]] = ([], [])
    for i in range(n):
        for fn, out in ((a, samples[0]), (b, samples[1])):
            t0 = time.perf_counter()
            fn(i)
            out.append((time.perf_counter() - t0) * 1000)
    result = []
    for out in samples:
        out.sort()
        result.append((out[n // 2], out[int(n * 0.95)]))
    return result[0], result[1]


def measure(tmp: str, compression: str, value: object, n: int) -> list[Any]:
    offload = OffloadBackend(f"file://{tmp}/objects-{compression}", compression=compression)
    store = StateStore(
        f"sqlite:///{tmp}/state-{compression}.db", settings=Settings(), worker_backend=offload
    )
    ours = store.task_state(TaskScope("dag", "run", "task"))
    raw_path = Path(tmp) / "raw.json"

    def raw_set(i: int) -> None:  # the floor: serialise and write the same bytes
        raw_path.write_text(json.dumps(value, separators=(",", ":")))

    def raw_get(i: int) -> None:
        json.loads(raw_path.read_text())

    def our_set(i: int) -> None:
        ours.set(f"k{i % 5}", value)  # type: ignore[arg-type]

    def our_get(i: int) -> None:
        ours.get(f"k{i % 5}")

    for i in range(5):
        our_set(i)
        raw_set(i)
    results = [paired(raw_set, our_set, n), paired(raw_get, our_get, n)]
    store.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--mb", type=float, default=1.0)
    args = parser.parse_args()
    started = meta()
    row = {"id": 123456, "name": "a typical record", "score": 0.75, "tags": ["x", "y"]}
    count = int(args.mb * 1_000_000 / len(json.dumps(row, separators=(",", ":"))))
    value = {"rows": [dict(row, id=100000 + i) for i in range(count)]}
    size = len(json.dumps(value, separators=(",", ":")))
    with tempfile.TemporaryDirectory() as tmp:
        results = {c: measure(tmp, c, value, args.n) for c in ("none", "gzip")}
    # What every store pays before any I/O: the value rules walk every nested item.
    (encode_p50, _), _ = paired(lambda i: encode_value(value), lambda i: None, args.n)

    print(f"offload via file://, value {size / 1e6:.2f} MB of JSON, n={args.n}")
    print(
        f"{'compression':11} {'op':4} {'raw p50':>9} {'raw p95':>9} {'ours p50':>9} "
        f"{'ours p95':>9} {'p50 ratio':>9}"
    )
    for compression, ops in results.items():
        for op, ((r50, r95), (o50, o95)) in zip(("set", "get"), ops, strict=True):
            print(
                f"{compression:11} {op:4} {r50:7.2f}ms {r95:7.2f}ms {o50:7.2f}ms {o95:7.2f}ms "
                f"{o50 / r50:8.2f}×"
            )
    print(f"of which value validation + encoding (values.encode_value): p50 {encode_p50:.2f}ms")
    figures: dict[str, Any] = {"value_bytes": size, "n": args.n, "encode_p50_ms": encode_p50}
    for compression, ops in results.items():
        for op, ((r50, r95), (o50, o95)) in zip(("set", "get"), ops, strict=True):
            figures[f"{compression} {op}"] = {
                "raw_p50_ms": r50, "raw_p95_ms": r95, "ours_p50_ms": o50, "ours_p95_ms": o95,
                "p50_ratio": o50 / r50,
            }  # fmt: skip
    command = f"bench/offload.py --n {args.n} --mb {args.mb:g}"
    save("offload", figures, command=command, started=started)


if __name__ == "__main__":
    main()
