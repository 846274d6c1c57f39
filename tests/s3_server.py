"""A real S3 API on loopback for tests: moto's server (moto[server] from PyPI) in a subprocess."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.postgres_server import free_port, stop_server, wait_for_port


@contextlib.contextmanager
def running_s3() -> Iterator[str]:
    """Yield the endpoint URL of a fresh moto S3 server on 127.0.0.1."""
    port = free_port()
    moto = Path(sys.executable).with_name("moto_server")
    proc = subprocess.Popen(
        [str(moto), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc, "moto_server")
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_server(proc)


def s3_options(endpoint: str) -> dict[str, object]:
    return {
        "key": "testing",
        "secret": "testing",
        "endpoint_url": endpoint,
        "client_kwargs": {"region_name": "eu-west-1"},
        "skip_instance_cache": True,
        "use_listings_cache": False,
    }
