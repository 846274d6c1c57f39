"""taskstate's metrics inside real Airflow 3.2 with `[metrics] statsd_on`: a DAG task's calls
reach a UDP listener, and with Airflow's `Stats` set up (as its task runner does) they go
through Airflow's own client. One Airflow version: the facade's Airflow side is the same on all."""

from __future__ import annotations

import contextlib
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.airflow.harness import REPO, AirflowHome, versions

# One version keeps the stage short. The shared 3.2 home (conftest's `airflow_home`, asked for
# its "3.2" instance): a lane without 3.2 skips, naming it; a lane with 3.2 runs these.
pytestmark = [
    pytest.mark.airflow,
    pytest.mark.skipif("3.2" not in versions(), reason="Airflow 3.2 not selected"),
    pytest.mark.parametrize("airflow_home", ["3.2"], indirect=True),
]

STATSD = "statsd==4.0.1"  # the pinned Airflow envs do not carry the extra
PROBE = Path(__file__).with_name("metrics_stats_probe.py")


@pytest.fixture
def airflow_32(airflow_home: AirflowHome) -> AirflowHome:
    assert airflow_home.version == "3.2"
    return airflow_home


@pytest.fixture
def statsd_env(
    airflow_32: AirflowHome, tmp_path: Path
) -> Iterator[tuple[dict[str, str], socket.socket]]:
    overlay = tmp_path / "statsd"
    subprocess.run(
        [str(REPO / ".venv" / "bin" / "uv"), "pip", "install", "--quiet",
         "--python", str(airflow_32.env / "bin" / "python"), "--target", str(overlay), STATSD],
        check=True,
    )  # fmt: skip
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        env = {
            "PYTHONPATH": f"{airflow_32.overlay}:{overlay}",
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(listener.getsockname()[1]),
            "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
        }
        yield env, listener


def counts(listener: socket.socket) -> dict[str, str]:
    """name -> value|type of every taskstate datagram line received."""
    listener.settimeout(2)
    lines: list[str] = []
    with contextlib.suppress(TimeoutError):
        while True:
            lines += listener.recv(65536).decode().splitlines()
    return {
        name: rest
        for name, _, rest in (line.partition(":") for line in lines)
        if "taskstate" in name
    }


def test_a_dag_task_sends_every_operation(
    airflow_32: AirflowHome, statsd_env: tuple[dict[str, str], socket.socket]
) -> None:
    env, listener = statsd_env
    airflow_32.dags_test("ts_metrics", env=env)
    got = counts(listener)
    for op in ("set", "get", "update", "compare_and_set", "delete", "clear"):
        assert got[f"airflow.taskstate.task.{op}.calls"] == "1|c", got
        assert got[f"airflow.taskstate.task.{op}"].endswith("|ms"), got
    assert got["airflow.taskstate.task.compare_and_set.conflicts"] == "1|c", got


def test_through_airflows_own_stats(
    airflow_32: AirflowHome, statsd_env: tuple[dict[str, str], socket.socket]
) -> None:
    env, listener = statsd_env
    proc = airflow_32.python(str(PROBE), env=env)
    assert "PROBE done" in proc.stdout, proc.stderr[-3000:]
    assert "PROBE sink AirflowSink" in proc.stdout, proc.stdout
    got = counts(listener)
    assert got["airflow.taskstate.task.get.calls"] == "2|c", got
    assert got["airflow.taskstate.task.set.calls"] == "1|c", got
    assert got["airflow.taskstate.task.set"].endswith("|ms"), got
