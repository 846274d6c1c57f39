"""`taskstate serve` as a user runs it, a real process; `taskstate token create` and the
refusals that end before serving, in this process (tests/cli.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from tests.api.conftest import SECRET
from tests.cli import invoke
from tests.postgres_server import wait_for_http

TASKSTATE = [sys.executable, "-m", "taskstate"]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    return {**env, "AIRFLOW_HOME": str(tmp_path), **extra}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serving(
    tmp_path: Path, env: dict[str, str], url: str | None = None, *options: str
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`taskstate serve [options]` on a free loopback port, on `url` (default: a SQLite file)."""
    port = _free_port()
    url = url or f"sqlite:///{tmp_path}/s.db"
    proc = subprocess.Popen(
        [*TASKSTATE, "--url", url, "serve", "--port", str(port), *options],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_for_http(f"{base}/taskstate/health", proc, "taskstate serve")
        except RuntimeError as exc:
            exited = proc.poll() is not None
            raise AssertionError(proc.communicate()[1] if exited else exc) from None
        yield base, proc
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)


def test_open_server_on_loopback_says_so(tmp_path: Path) -> None:
    with serving(tmp_path, _env(tmp_path)) as (base, proc):
        response = httpx.put(
            f"{base}/taskstate/api/v2/dags/d/dagRuns/r/taskInstances/t/state-store/k",
            json={"value": 1},
        )
        assert response.status_code == 204
    assert "OPEN" in proc.stderr.read()  # type: ignore[union-attr]


def test_the_banner_names_urls_that_answer_and_a_busy_port_fails_first(tmp_path: Path) -> None:
    with serving(tmp_path, _env(tmp_path)) as (base, proc):
        assert proc.stderr is not None
        banner = "".join(proc.stderr.readline() for _ in range(4))
        urls = re.findall(r"http://\S+", banner)
        assert f"{base}/taskstate/ui/" in urls and len(urls) == 3, banner
        for url in urls:
            assert httpx.get(url).status_code == 200, url
        port = base.rsplit(":", 1)[1]
        busy = subprocess.run(
            [*TASKSTATE, "--url", f"sqlite:///{tmp_path}/s.db", "serve", "--port", port],
            env=_env(tmp_path), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert busy.returncode == 1
    assert f"port {port} on 127.0.0.1 is in use" in busy.stderr
    assert "http://" not in busy.stderr  # no banner for a server that never served


def test_json_log_has_a_line_per_request_and_an_audit_line_per_write(tmp_path: Path) -> None:
    task = "/taskstate/api/v2/dags/etl/dagRuns/r1/taskInstances/load/state-store"
    with serving(tmp_path, _env(tmp_path), None, "--log-format", "json") as (base, proc):
        assert httpx.put(f"{base}{task}/cursor", json={"value": "s3cret-v4lue"}).status_code == 204
        assert httpx.get(f"{base}{task}/cursor").json()["value"] == "s3cret-v4lue"
        assert httpx.delete(f"{base}{task}/cursor").status_code == 204
        assert httpx.delete(f"{base}{task}?map_index=-1").status_code == 204
        assert httpx.put(f"{base}{task}/k", content=b"{").status_code == 422  # no write
    assert proc.stderr is not None
    lines = [json.loads(line) for line in proc.stderr.read().splitlines() if line.startswith("{")]
    access = [(x["method"], x["path"], x["status"]) for x in lines if x.get("event") == "access"]
    assert access[-5:] == [
        ("PUT", f"{task}/cursor", 204), ("GET", f"{task}/cursor", 200),
        ("DELETE", f"{task}/cursor", 204), ("DELETE", f"{task}?map_index=-1", 204),
        ("PUT", f"{task}/k", 422),
    ]  # fmt: skip
    audit = [
        (x["action"], x["who"], x["scope"], x["key"]) for x in lines if x.get("event") == "audit"
    ]
    who = {"kind": "api", "subject": "anonymous"}
    where = {"dag_id": "etl", "run_id": "r1", "task_id": "load", "map_index": -1}
    assert audit == [("set", who, where, "cursor"), ("delete", who, where, "cursor"),
                     ("clear", who, where, None)]  # fmt: skip
    assert "s3cret" not in json.dumps(lines)  # never the value


def test_refuses_a_public_host_without_a_key(tmp_path: Path) -> None:
    done = invoke("serve", "--host", "0.0.0.0", env=_env(tmp_path))
    assert done.returncode == 2
    assert "refusing to serve on 0.0.0.0" in done.stderr


def test_a_created_token_opens_what_it_names(tmp_path: Path) -> None:
    env = _env(tmp_path, AIRFLOW__STATE_STORE__TASKSTATE_SECRET_KEY=SECRET)
    created = invoke(
        "token", "create", "--dag-id", "etl_*", "--subject", "ci", "--expires-in", "1h", env=env
    )
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    with serving(tmp_path, env) as (base, proc):
        route = f"{base}/taskstate/api/v2/dags/etl_x/dagRuns/r/taskInstances/t/state-store"
        assert httpx.get(route).status_code == 401
        auth = {"Authorization": f"Bearer {token}"}
        assert httpx.get(route, headers=auth).status_code == 200
        other = route.replace("etl_x", "report")
        assert httpx.get(other, headers=auth).status_code == 403
    assert "tokens required" in proc.stderr.read()  # type: ignore[union-attr]


def test_the_key_can_come_from_a_command(tmp_path: Path) -> None:
    env = _env(tmp_path, AIRFLOW__STATE_STORE__TASKSTATE_SECRET_KEY_CMD=f"echo {SECRET}")
    created = invoke("token", "create", "--admin", env=env)
    assert created.returncode == 0, created.stderr
    from taskstate.api.tokens import SigningKeys

    assert SigningKeys([SECRET]).verify(created.stdout.strip()).admin


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "name what the token may touch"),
        (["--run-id", "r"], "name what the token may touch"),
        (["--asset", "a", "--run-id", "r"], "need --dag-id"),
        (["--admin", "--expires-in", "soon"], "is not a duration"),
    ],
)
def test_token_create_refuses_bad_options(tmp_path: Path, args: list[str], message: str) -> None:
    env = _env(tmp_path, AIRFLOW__STATE_STORE__TASKSTATE_SECRET_KEY=SECRET)
    done = invoke("token", "create", *args, env=env)
    assert done.returncode == 2
    assert message in done.stderr


def test_token_create_without_a_key_says_what_to_set(tmp_path: Path) -> None:
    done = invoke("token", "create", "--admin", env=_env(tmp_path))
    assert done.returncode == 1
    assert "taskstate_secret_key" in done.stderr


def test_a_short_key_is_refused(tmp_path: Path) -> None:
    env = _env(tmp_path, AIRFLOW__STATE_STORE__TASKSTATE_SECRET_KEY="short")
    done = invoke("token", "create", "--admin", env=env)
    assert done.returncode == 1
    assert "at least 32 characters" in done.stderr


def test_import_taskstate_imports_no_server_dependency() -> None:
    code = (
        "import sys, taskstate, taskstate.cli; "
        "bad = [m for m in ('fastapi', 'starlette', 'uvicorn', 'jwt', 'pydantic', 'httpx') "
        "if m in sys.modules]; print(bad)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
