"""ResumableJobMixin on Airflow's real BaseOperator, in every pinned Airflow env (2.10 to 3.3):
both base-class orders (the skill's `class Op(BaseOperator, ResumableJobMixin)` is a TypeError
on Airflow 3.3.2's own mixin), `durable` from the constructor, `default_args`, a DAG's
`default_args` and `.partial()`, Airflow's counters and the OpenTelemetry span."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.airflow

REPO = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("resumable_probe.py")
# Real Airflow runs only when scripts/test-airflow.sh (or a person) picks versions.
VERSIONS = os.environ.get("TASKSTATE_AIRFLOW_VERSIONS", "").split() or ["none"]
CLASSES = ["SkillOrder", "MixinFirst", "SkillOrderOwnInit", "MixinFirstOwnInit", "Subclass"]


def airflow_python(version: str) -> Path:
    if version == "none":
        pytest.skip("real Airflow: set TASKSTATE_AIRFLOW_VERSIONS (scripts/test-airflow.sh)")
    script = REPO / "scripts" / "airflow-env.sh"
    if not script.exists():
        pytest.skip("scripts/airflow-env.sh (the pinned Airflow envs) is not on this branch")
    if not (REPO / "src" / "taskstate" / "airflow").is_dir():
        # A shared env may hold another checkout's taskstate, whose `airflow.policy` entry
        # point names taskstate.airflow: Airflow cannot even import without it.
        pytest.skip("the Airflow integration (taskstate.airflow) is not on this branch yet")
    out = subprocess.run(
        ["bash", str(script), version], capture_output=True, text=True, check=True, cwd=REPO
    )
    return Path(out.stdout.strip().splitlines()[-1]) / "bin" / "python"


@pytest.fixture(scope="module", params=VERSIONS)
def probe(request: pytest.FixtureRequest) -> dict[str, Any]:
    python = airflow_python(request.param)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run(
        [str(python), str(PROBE)], capture_output=True, text=True, env=env, timeout=300
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("PROBE ")]
    assert lines, out.stderr[-3000:]
    result: dict[str, Any] = json.loads(lines[-1][len("PROBE ") :])
    assert result["airflow"].startswith(request.param + ".")
    return result


@pytest.mark.parametrize("cls", CLASSES)
def test_both_class_orders_construct_and_honour_durable(probe: dict[str, Any], cls: str) -> None:
    case = probe["classes"][cls]
    assert "error" not in case, case
    assert case["default"] is True
    assert case["explicit_false"] is False
    assert case["task_default_args"] is False
    assert case["dag_default_args"] is False
    assert case["explicit_beats_dag_default_args"] is True
    if cls != "SkillOrder" and cls != "MixinFirst":  # mapped: an argument to expand over
        assert case["partial"] is False
        assert case["partial_dag_default_args"] is False
        assert case["partial_task_default_args"] is False


@pytest.mark.parametrize("cls", CLASSES)
def test_the_second_run_returns_the_first_jobs_result(probe: dict[str, Any], cls: str) -> None:
    case = probe["classes"][cls]
    assert case["first"] == case["second"] == {"result_of": case["stored"]}


def test_airflows_counters_are_emitted(probe: dict[str, Any]) -> None:
    for cls in CLASSES:
        tags = {"operator": cls}
        mine = [name for name, t in probe["stats"] if t == tags]
        assert mine == [
            "resumable_job.fresh_submit",
            "resumable_job.reconnect_attempt",
            "resumable_job.already_succeeded",
        ]


def test_a_span_per_decision(probe: dict[str, Any]) -> None:
    # Every pinned env carries opentelemetry-sdk (test_import_cost asserts it): no spans is a bug.
    assert probe["spans"] is not None, "the probe found no opentelemetry-sdk"
    decisions = [(s["operator"], s["resumable.decision"]) for s in probe["spans"]]
    for cls in CLASSES:
        assert decisions.count((cls, "fresh_submit")) == 1
        assert decisions.count((cls, "already_succeeded")) == 1
    reconnected = [s for s in probe["spans"] if s["resumable.decision"] == "already_succeeded"]
    assert all(s["resumable.prior_status"] == "SUCCEEDED" for s in reconnected)


STATS_PROBE = Path(__file__).with_name("resumable_stats_probe.py")
STATSD = "statsd==4.0.1"  # Airflow's statsd client; the pinned envs do not carry the extra


@pytest.mark.parametrize("version", VERSIONS)
def test_counters_reach_a_statsd_listener(version: str, tmp_path: Path) -> None:
    """Airflow's real Stats (statsd over UDP, to a socket this test listens on) receives the
    mixin's reconnect_success, terminal_resubmit and recover_from_intent counters."""
    python = airflow_python(version)
    overlay = tmp_path / "statsd"
    uv = str(REPO / ".venv" / "bin" / "uv")
    subprocess.run(
        [uv, "pip", "install", "--quiet", "--python", str(python), "--target", str(overlay),
         STATSD],
        check=True,
    )  # fmt: skip
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")},
            "AIRFLOW_HOME": str(tmp_path / "home"),
            "PYTHONPATH": f"{REPO / 'src'}:{overlay}",
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(listener.getsockname()[1]),
            "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
        }
        out = subprocess.run(
            [str(python), str(STATS_PROBE)], capture_output=True, text=True, env=env, timeout=300
        )
        assert "PROBE done" in out.stdout, out.stderr[-3000:]
        listener.settimeout(2)
        received = []
        with contextlib.suppress(TimeoutError):
            while True:
                received += listener.recv(65536).decode().splitlines()
    counted = Counter(line.split(":")[0] for line in received)
    for name in ("reconnect_success", "terminal_resubmit", "recover_from_intent"):
        assert counted[f"airflow.resumable_job.{name}"] == 1, received
    assert counted["airflow.resumable_job.reconnect_attempt"] == 2, received  # the two stored ids
