"""The metric registry (`taskstate.metrics.names.REGISTRY`): `docs/metrics.md`'s table is
generated from it, a name it does not declare cannot be recorded, and the resumable counters
reach StatsD from a plain Python process (no Airflow) through it; the HTTP accessors are
instrumented through the accessors' hook like the local ones."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from tests.backends.test_http import Server
from tests.test_metrics import listener, parsed, received, run_python, statsd_env

from taskstate import StateStore, TaskScope
from taskstate.metrics import COUNTER, REGISTRY, TIMER, Metrics, PrometheusSink, declared
from taskstate.metrics.dashboard import (
    MAPPINGS_END,
    MAPPINGS_START,
    dashboard_json,
    prometheus_name,
    with_mappings,
)
from taskstate.metrics.names import TABLE_END, TABLE_START, with_table
from taskstate.remote import RemoteTaskState
from taskstate.settings import Settings

__all__ = ["listener"]  # the fixture, used by name below

REPO = Path(__file__).resolve().parents[1]


def test_the_docs_table_is_generated_from_the_registry() -> None:
    page = (REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
    assert page == with_table(page), "run: python -m taskstate.metrics docs/metrics.md"
    for metric in REGISTRY:
        assert f"| `{metric.name}` |" in page


def test_an_undeclared_name_or_kind_cannot_be_recorded() -> None:
    metrics = Metrics(prometheus=PrometheusSink(), flush_seconds=3600)
    with pytest.raises(ValueError, match="not declared"):
        metrics.count("taskstate.task.get.surprise")
    with pytest.raises(ValueError, match="not declared"):
        metrics.count("taskstate.task.get")  # declared, but a timer
    with pytest.raises(ValueError, match="not declared"):
        metrics.timing("taskstate.task.get.calls", 0.1)  # sent by the sinks, never recorded
    metrics.timing("taskstate.asset.compare_and_set", 0.001)
    metrics.count("taskstate.errors.InvalidValueError", 1, (("backend", "sqlite"),))
    assert "taskstate_asset_compare_and_set_seconds_count 1" in metrics.prometheus_text()


def test_every_declared_pattern_is_distinct_and_classified() -> None:
    names = [m.name for m in REGISTRY]
    assert len(names) == len(set(names))
    assert declared("taskstate.task.set") is declared("taskstate.asset.write")
    assert declared("taskstate.task.set").kind == TIMER  # type: ignore[union-attr]
    assert declared("resumable_job.fresh_submit").kind == COUNTER  # type: ignore[union-attr]
    assert declared("taskstate.nothing") is None


def test_resumable_counters_reach_statsd_without_airflow(
    tmp_path: Path, listener: socket.socket
) -> None:
    """A plain Python process (Airflow not installed in this venv): the mixin's counters go
    through taskstate's own StatsD sink, sent at exit."""
    env = {**statsd_env(tmp_path, listener), "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True"}
    proc = run_python(
        f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from taskstate import StateStore, TaskScope
        from tests.resumable.test_mixin import Jobs, Op
        state = StateStore("sqlite:///{tmp_path}/s.db").task_state(TaskScope("d", "r", "t"))
        ctx = {{"task_state_store": state}}
        jobs = Jobs()
        Op(jobs).execute_resumable(ctx)   # fresh submit
        Op(jobs).execute_resumable(ctx)   # the stored id: reconnect attempt, already succeeded
        assert "airflow" not in sys.modules
        """,
        env,
    )
    assert proc.returncode == 0, proc.stderr
    got = parsed(received(listener))
    for name in ("fresh_submit", "reconnect_attempt", "already_succeeded"):
        assert got[f"airflow.resumable_job.{name},operator=Op"] == (1.0, "c"), got


def test_python_m_taskstate_metrics_rewrites_a_pages_table(tmp_path: Path) -> None:
    page = tmp_path / "metrics.md"
    stale = f"intro\n{TABLE_START}\n| `taskstate.gone` | counter | — | old |\n{TABLE_END}\nend\n"
    page.write_text(stale, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "taskstate.metrics", str(page)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert page.read_text(encoding="utf-8") == with_table(stale)
    assert "taskstate.gone" not in page.read_text(encoding="utf-8")


def test_the_dashboard_and_exporter_mappings_are_generated_from_the_registry() -> None:
    run = "run: python -m taskstate.metrics docs/metrics.md docs/grafana-taskstate.json"
    dashboard = (REPO / "docs" / "grafana-taskstate.json").read_text(encoding="utf-8")
    assert dashboard == dashboard_json(), run
    page = (REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
    assert page == with_mappings(page), run
    # Every metric a panel queries is a registry name, seen through the mappings.
    queried = {t["expr"] for p in json.loads(dashboard)["panels"] for t in p["targets"]}
    assert any("taskstate_calls{" in expr for expr in queried)
    assert prometheus_name("taskstate.task.compare_and_set.conflicts") == (
        "airflow_taskstate_task_compare_and_set_conflicts"
    )
    assert prometheus_name("taskstate.api.request") == "taskstate_api_request_seconds"
    assert prometheus_name("taskstate.task.get") == "taskstate_op_seconds"  # a timer
    assert prometheus_name("taskstate.task.retries") == "airflow_taskstate_task_retries"


def test_a_dashboard_cannot_query_an_undeclared_metric() -> None:
    with pytest.raises(ValueError, match="not declared"):
        prometheus_name("taskstate.task.get.p99")
    with pytest.raises(ValueError, match="not declared"):
        prometheus_name("taskstate.store.clear_task")  # once in the docs, never sent


def test_python_m_taskstate_metrics_rewrites_the_dashboard_and_mappings(tmp_path: Path) -> None:
    board, page = tmp_path / "board.json", tmp_path / "metrics.md"
    board.write_text("{}", encoding="utf-8")
    stale = f"{TABLE_START}\n{TABLE_END}\n{MAPPINGS_START}\nold\n{MAPPINGS_END}\n"
    page.write_text(stale, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "taskstate.metrics", str(page), str(board)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert board.read_text(encoding="utf-8") == dashboard_json()
    assert page.read_text(encoding="utf-8") == with_mappings(with_table(stale))
    assert "- match:" in page.read_text(encoding="utf-8")


def test_the_http_accessors_are_instrumented_through_the_hook(tmp_path: Path) -> None:
    """A real `taskstate serve`: the remote accessor is timed per operation, and its hook
    counts encoded bytes, a compare_and_set conflict and a 412 retry of `update`."""
    server = Server(tmp_path)
    try:
        metrics = Metrics(prometheus=PrometheusSink(), flush_seconds=3600)
        with StateStore(server.url, settings=Settings(), metrics=metrics) as store:
            state = store.task_state(TaskScope("d", "r", "t"))
            other = StateStore(server.url, settings=Settings()).task_state(TaskScope("d", "r", "t"))
            assert type(state).__mro__[1] is RemoteTaskState  # the instrumented subclass
            state.set("k", 1)
            assert state.get("k") == 1
            assert not state.compare_and_set("k", 7, 8)
            raced: list[int] = []

            def race(value: int) -> int:
                if not raced:  # another writer commits between the read and the write
                    raced.append(value)
                    other.set("k", 5)
                return value + 1

            assert state.update("k", race) == 6
            text = metrics.prometheus_text()
    finally:
        server.stop()
    http = '{backend="http"}'
    assert f"taskstate_task_set_seconds_count{http} 1" in text
    assert f"taskstate_task_get_seconds_count{http} 1" in text
    assert f"taskstate_task_update_seconds_count{http} 1" in text
    assert f"taskstate_task_compare_and_set_conflicts_total{http} 1" in text
    assert f"taskstate_task_retries_total{http} 1" in text
    # "1", "8" (compare_and_set encodes `new` up front), "2" and "6" from the two update rounds
    assert f"taskstate_task_value_bytes_total{http} 4" in text
