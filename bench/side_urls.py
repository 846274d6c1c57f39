"""One empty store per side of an A/B bench, on SQLite (a file each) or PostgreSQL (a database
each on one throwaway server), so the sides differ only in what the bench does to them.

    with side_urls("postgres", ("with", "without"), prefix="w", pg_root=None) as urls: ...
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import psycopg
from tests.postgres_server import running_server


@contextlib.contextmanager
def side_urls(
    kind: str, sides: Sequence[str], *, prefix: str, pg_root: str | None = None
) -> Iterator[dict[str, str]]:
    """A URL per side, its store deleted afterwards."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(dir=pg_root) as tmp:
            yield {side: f"sqlite:///{tmp}/{side}.db" for side in sides}
        return
    with running_server(root=Path(pg_root) if pg_root else None) as server:
        base = server.url.rsplit("/", 1)[0]
        with psycopg.connect(server.url, autocommit=True) as admin:
            for side in sides:
                admin.execute(f"DROP DATABASE IF EXISTS {prefix}_{side}")
                admin.execute(f"CREATE DATABASE {prefix}_{side}")
        yield {side: f"{base}/{prefix}_{side}" for side in sides}
