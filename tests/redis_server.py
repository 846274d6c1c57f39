"""A throwaway Redis server (Debian's `redis-server`, installed on first use when we are root)
on 127.0.0.1 and a free port, for the Celery broker and result backend; killed at the end."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tests.postgres_server import START_TIMEOUT, debian_command, free_port


@contextmanager
def running_redis() -> Iterator[str]:
    """Yields `redis://127.0.0.1:<port>`."""
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="taskstate-redis-")
    binary = debian_command("redis-server", "redis-server")
    proc = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
         "--appendonly", "no", "--dir", workdir, "--protected-mode", "yes"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.1)
        yield f"redis://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)
