"""A throwaway PgBouncer (Debian's `pgbouncer` package, installed on first use when we are root) on
127.0.0.1 and a free port, in front of a `PostgresServer`: the way the official Airflow Helm chart
and most large deployments reach PostgreSQL.

Transaction pooling by default: a server connection belongs to a client only for one transaction,
so anything that outlives a transaction on the server (prepared statements, SET, session advisory
locks, temporary tables) breaks. Any database name is passed through to the same server (`*`), so
`fresh_postgres_url`'s databases work through it too. Clients authenticate with SCRAM against the
password in the config's auth file, and PgBouncer logs into PostgreSQL with the same one.
Used by the `pgbouncer` fixture (tests/conftest.py) and bench/pgbouncer.py.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from tests.postgres_server import START_TIMEOUT, PostgresServer, debian_command, free_port


class PgBouncer:
    """`start()`, `url` (the server's URL with PgBouncer's port), `show("POOLS")`, `kill()` +
    `start()` (every client connection dropped at once), `stop()`."""

    def __init__(
        self,
        server: PostgresServer,
        *,
        pool_mode: str = "transaction",
        pool_size: int = 4,
        query_wait_timeout: int = 120,
    ) -> None:
        self.binary = debian_command("pgbouncer", "pgbouncer")
        self.server = server
        self.pool_mode = pool_mode
        self.pool_size = pool_size
        self.query_wait_timeout = query_wait_timeout
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="taskstate-pgbouncer-"))
        self.proc: subprocess.Popen[bytes] | None = None
        server_url = urlsplit(server.url)
        self.role, self.password = server_url.username or "", server_url.password or ""
        netloc = f"{server_url.netloc.rpartition(':')[0]}:{self.port}"
        self.url = urlunsplit(server_url._replace(netloc=netloc))  # the server's own database

    def _config(self) -> str:
        return "\n".join(
            [
                "[databases]",
                f"* = host=127.0.0.1 port={self.server.port}",
                "[pgbouncer]",
                "listen_addr = 127.0.0.1",
                f"listen_port = {self.port}",
                "unix_socket_dir =",
                f"logfile = {self.root / 'pgbouncer.log'}",
                f"pidfile = {self.root / 'pgbouncer.pid'}",
                "auth_type = scram-sha-256",
                f"auth_file = {self.root / 'userlist.txt'}",
                f"admin_users = {self.role}",
                f"pool_mode = {self.pool_mode}",
                f"default_pool_size = {self.pool_size}",
                "min_pool_size = 0",
                "reserve_pool_size = 0",
                "max_client_conn = 2000",
                # How long a client may wait for a server connection before PgBouncer drops it.
                f"query_wait_timeout = {self.query_wait_timeout}",
                # The default waits 15 s before reconnecting after a failed server login; tests
                # restart the server and expect PgBouncer back within the store's retry window.
                "server_login_retry = 1",
                "",
            ]
        )

    def start(self) -> PgBouncer:
        (self.root / "pgbouncer.ini").write_text(self._config())
        (self.root / "userlist.txt").write_text(f'"{self.role}" "{self.password}"\n')
        user = self.server.user  # PgBouncer refuses to run as root, like PostgreSQL
        if user:
            entry = pwd.getpwnam(user)
            for path in (self.root, *self.root.iterdir()):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        cmd = [self.binary, str(self.root / "pgbouncer.ini")]
        if user:
            cmd = ["runuser", "-u", user, "--", *cmd]
        (self.root / "pgbouncer.pid").unlink(missing_ok=True)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                self.show("VERSION")
                return self
            except psycopg.OperationalError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"pgbouncer did not start: {self.log()[-2000:]}")
            time.sleep(0.05)

    def _has_log(self) -> bool:
        return (self.root / "pgbouncer.log").exists()

    def log(self) -> str:
        return (self.root / "pgbouncer.log").read_text() if self._has_log() else ""

    def route(self, server_url: str) -> str:
        """`server_url` (any database on the same server) through this PgBouncer."""
        return server_url.replace(f":{self.server.port}/", f":{self.port}/")

    def show(self, what: str) -> list[dict[str, Any]]:
        """`SHOW <what>` on the admin console (simple protocol: PgBouncer's console has no
        other), as a list of rows keyed by column name."""
        admin = self.url.rsplit("/", 1)[0] + "/pgbouncer"
        with psycopg.connect(admin, autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
            cursor = conn.execute(f"SHOW {what}")
            names = [c.name for c in cursor.description or ()]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def server_connections(self, database: str | None = None) -> int:
        """Server connections PgBouncer holds to PostgreSQL (for `database`, or all)."""
        return sum(
            1 for row in self.show("SERVERS") if database is None or row["database"] == database
        )

    def kill(self) -> None:
        """SIGKILL: every client and server connection ends at once, mid-statement or not.
        `start()` brings it back on the same port."""
        pidfile = self.root / "pgbouncer.pid"
        if pidfile.exists():  # under runuser, our child is runuser, not PgBouncer
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def running_pgbouncer(server: PostgresServer, **options: Any) -> Iterator[PgBouncer]:
    bouncer = PgBouncer(server, **options)
    try:
        yield bouncer.start()
    finally:
        bouncer.stop()
