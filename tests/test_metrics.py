"""Metrics and tracing (`taskstate.metrics`) from plain Python: a real UDP listener receives the
StatsD datagrams, the OpenTelemetry SDK's in-memory exporters receive spans and metrics, and
the Prometheus text parses with prometheus_client's own parser."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from taskstate import AssetScope, StateStore, TaskScope, TaskStateStore
from taskstate.backends.offload import OffloadBackend
from taskstate.errors import (
    InvalidValueError,
    PreconditionFailedError,
    UnsupportedValueTypeError,
)
from taskstate.metrics import (
    MAX_NAME,
    Metrics,
    MetricsSettings,
    PrometheusSink,
    StatsdSink,
)
from taskstate.settings import Settings

SCOPE = TaskScope("dag", "run_1", "task")
ASSET = AssetScope("orders", "s3://bucket/orders")
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(2)
        yield sock


def received(sock: socket.socket) -> list[str]:
    lines: list[str] = []
    with contextlib.suppress(TimeoutError):
        while True:
            lines += sock.recv(65536).decode().splitlines()
            sock.settimeout(0.3)
    return lines


def parsed(lines: list[str]) -> dict[str, tuple[float, str]]:
    """name -> (value, type) of each datagram line (`name:value|type`)."""
    out = {}
    for line in lines:
        name, _, rest = line.partition(":")
        value, _, kind = rest.partition("|")
        assert name not in out, f"{name} sent twice in one flush"
        out[name] = (float(value), kind)
    return out


def statsd_metrics(sock: socket.socket, **options: object) -> Metrics:
    port = sock.getsockname()[1]
    settings = MetricsSettings(statsd_on=True, statsd_host="127.0.0.1", statsd_port=port)
    settings = MetricsSettings(**{**settings.__dict__, **options})
    return Metrics([StatsdSink(settings)], flush_seconds=3600)


def open_store(tmp_path: Path, metrics: Metrics, **kwargs: object) -> StateStore:
    return StateStore(
        f"sqlite:///{tmp_path}/state.db", settings=Settings(), metrics=metrics, **kwargs
    )  # type: ignore[arg-type]


def test_every_operation_sends_a_timer_and_a_call_count(
    tmp_path: Path, listener: socket.socket
) -> None:
    metrics = statsd_metrics(listener, influxdb_tags=True)
    store = open_store(tmp_path, metrics)
    task, asset = store.task_state(SCOPE), store.asset_state(ASSET)
    for acc in (task, asset):
        acc.set("k", 1)
        acc.set("k", 2)
        assert acc.get("k") == 2
        assert acc.update("k", lambda v: v + 1) == 3
        assert acc.compare_and_set("k", 3, 4)
        acc.write("w", "x")
        acc.delete("k")
        acc.clear()
    metrics.flush()
    got = parsed(received(listener))
    for kind in ("task", "asset"):
        for op in ("get", "set", "delete", "clear", "update", "compare_and_set", "write"):
            name = f"airflow.taskstate.{kind}.{op},backend=sqlite"
            value, unit = got[name]
            assert unit == "ms" and 0 < value < 10_000, (name, value)
            calls = got[f"airflow.taskstate.{kind}.{op}.calls,backend=sqlite"]
            assert calls == ((2.0 if op == "set" else 1.0), "c"), name
            total_ms, unit = got[f"airflow.taskstate.{kind}.{op}.total_ms,backend=sqlite"]
            assert unit == "c" and total_ms == pytest.approx(value * calls[0], rel=0.01, abs=0.01)
        # 1, 2, 3 (update), 4 (compare_and_set), "x" (write): the encoded JSON's bytes
        assert got[f"airflow.taskstate.{kind}.value_bytes,backend=sqlite"] == (7.0, "c")


def test_without_tagging_the_backend_tag_is_dropped_and_the_prefix_applies(
    tmp_path: Path, listener: socket.socket
) -> None:
    metrics = statsd_metrics(listener, statsd_prefix="prod")
    store = open_store(tmp_path, metrics)
    store.task_state(SCOPE).get("absent")
    metrics.flush()
    names = set(parsed(received(listener)))
    assert names == {
        "prod.taskstate.task.get",
        "prod.taskstate.task.get.calls",
        "prod.taskstate.task.get.total_ms",
    }


def test_conflicts_errors_and_allow_block_lists(tmp_path: Path, listener: socket.socket) -> None:
    metrics = statsd_metrics(listener, influxdb_tags=True, block_list=("task.delete",))
    store = open_store(tmp_path, metrics)
    acc = store.task_state(SCOPE)
    acc.set("k", 1)
    assert not acc.compare_and_set("k", 5, 6)
    with pytest.raises(InvalidValueError):
        acc.set("k", float("nan"))
    with pytest.raises(PreconditionFailedError):
        acc.write("k", 1, if_none_match=True)
    acc.delete("k")
    metrics.flush()
    got = parsed(received(listener))
    tag = ",backend=sqlite"
    assert got[f"airflow.taskstate.task.compare_and_set.conflicts{tag}"] == (1.0, "c")
    assert got[f"airflow.taskstate.task.set.errors{tag}"] == (1.0, "c")
    assert got[f"airflow.taskstate.task.write.errors{tag}"] == (1.0, "c")
    errors = {name: v for name, v in got.items() if name.startswith("airflow.taskstate.errors.")}
    assert errors == {
        f"airflow.taskstate.errors.InvalidValueError{tag},kind=task,op=set": (1.0, "c"),
        f"airflow.taskstate.errors.PreconditionFailedError{tag},kind=task,op=write": (1.0, "c"),
    }
    # A failed call is still timed; the blocked metric is not sent at all.
    assert got[f"airflow.taskstate.task.set.calls{tag}"] == (2.0, "c")
    assert not any(".task.delete" in name for name in got)


def test_a_user_exception_is_counted_as_other(tmp_path: Path, listener: socket.socket) -> None:
    class Boom(Exception):
        pass

    def explode(value: object) -> object:
        raise Boom

    metrics = statsd_metrics(listener)
    acc = open_store(tmp_path, metrics).task_state(SCOPE)
    with pytest.raises(Boom):
        acc.update("k", explode)
    metrics.flush()
    got = parsed(received(listener))
    assert got["airflow.taskstate.errors.other"] == (1.0, "c")


def test_offload_bytes_objects_and_update_retries(tmp_path: Path, listener: socket.socket) -> None:
    metrics = statsd_metrics(listener)
    offload = OffloadBackend(f"file://{tmp_path}/objects", keep_versions_s=0)
    store = open_store(tmp_path, metrics, worker_backend=offload)
    acc, other = store.task_state(SCOPE), store.task_state(SCOPE)
    big = "x" * 1000
    acc.set("big", big)
    calls = []

    def grow(value: str) -> str:
        calls.append(value)
        if len(calls) == 1:  # another writer commits between our read and our write
            other.set("big", big + "y")
        return value + "z"

    assert acc.update("big", grow) == big + "yz"
    metrics.flush()
    got = parsed(received(listener))
    # Three uploads: set, the first (discarded) update attempt, the retried one; plus other's set.
    assert got["airflow.taskstate.offload.objects"] == (4.0, "c")
    sizes = [len(big) + 2, len(big) + 3, len(big) + 3, len(big) + 4]  # JSON strings: quotes
    assert got["airflow.taskstate.offload.bytes"] == (float(sum(sizes)), "c")
    assert got["airflow.taskstate.task.retries"] == (1.0, "c")


def test_cleanup_reports_rows_batches_and_duration(tmp_path: Path, listener: socket.socket) -> None:
    metrics = statsd_metrics(listener)
    now = [1_000_000.0]
    store = open_store(tmp_path, metrics, clock=lambda: now[0])
    acc = store.task_state(SCOPE)
    for i in range(5):
        acc.write(f"k{i}", i, expires_at=now[0] + 10)
    now[0] += 60
    result = store.cleanup(batch_size=2)
    assert result.deleted == 5
    metrics.flush()
    got = parsed(received(listener))
    assert got["airflow.taskstate.cleanup.rows_deleted"] == (5.0, "c")
    assert got["airflow.taskstate.cleanup.batches"] == (float(result.batches), "c")
    assert got["airflow.taskstate.cleanup.calls"] == (1.0, "c")
    assert got["airflow.taskstate.cleanup"][1] == "ms"
    assert got["airflow.taskstate.cleanup.longest_batch_ms"][1] == "g"


def test_nothing_is_sent_twice_and_quiet_metrics_are_not_sent(
    tmp_path: Path, listener: socket.socket
) -> None:
    metrics = statsd_metrics(listener)
    acc = open_store(tmp_path, metrics).task_state(SCOPE)
    acc.get("k")
    metrics.flush()
    assert len(received(listener)) == 3  # timer, .calls, .total_ms
    metrics.flush()
    assert received(listener) == []
    acc.get("k")
    acc.get("k")
    metrics.flush()
    assert parsed(received(listener))["airflow.taskstate.task.get.calls"] == (2.0, "c")


def test_metrics_off_leaves_the_accessor_class_untouched(tmp_path: Path) -> None:
    store = open_store(tmp_path, Metrics())
    assert type(store.task_state(SCOPE)) is TaskStateStore
    assert not store.metrics.enabled


def test_every_metric_name_is_shorter_than_64_characters(
    tmp_path: Path, listener: socket.socket
) -> None:
    metrics = statsd_metrics(listener)
    store = open_store(tmp_path, metrics)
    store.asset_state(ASSET).compare_and_set("k", 1, 2)
    with pytest.raises(ValueError, match="longer than"):
        metrics.count("taskstate." + "x" * MAX_NAME)
    with pytest.raises(ValueError, match="total_ms"):  # what a timer sends beside it counts
        metrics.timing("taskstate." + "x" * (MAX_NAME - 15), 1.0)
    metrics.flush()
    sent = [line.partition(":")[0] for line in received(listener)]
    assert len(sent) == 5
    assert all(len(name.removeprefix("airflow.")) <= MAX_NAME for name in sent), sent


def test_prometheus_text_parses(tmp_path: Path) -> None:
    metrics = Metrics(prometheus=PrometheusSink())
    store = open_store(tmp_path, metrics)
    acc = store.task_state(SCOPE)
    acc.set("k", 'a"b\\c')
    acc.get("k")
    acc.get("k")
    with pytest.raises(UnsupportedValueTypeError):
        acc.set("k", {1: 2})
    store.cleanup()
    families = {f.name: f for f in text_string_to_metric_families(metrics.prometheus_text())}
    get = families["taskstate_task_get_seconds"]
    assert get.type == "summary"
    by_name = {s.name: s for s in get.samples}
    assert by_name["taskstate_task_get_seconds_count"].value == 2
    assert by_name["taskstate_task_get_seconds_count"].labels == {"backend": "sqlite"}
    assert by_name["taskstate_task_get_seconds_sum"].value > 0
    errors = families["taskstate_errors_UnsupportedValueTypeError"]  # the _total stripped
    assert errors.type == "counter"
    assert errors.samples[0].labels == {"backend": "sqlite", "kind": "task", "op": "set"}
    assert "taskstate_cleanup_rows_deleted" in families
    # Cumulative: a second scrape counts on from the first.
    acc.get("k")
    families = {f.name: f for f in text_string_to_metric_families(metrics.prometheus_text())}
    counts = [s for s in families["taskstate_task_get_seconds"].samples if "count" in s.name]
    assert counts[0].value == 3


def test_settings_come_from_the_metrics_section(tmp_path: Path) -> None:
    cfg = tmp_path / "airflow.cfg"
    cfg.write_text(
        "[metrics]\nstatsd_on = True\nstatsd_port = 9125\nstatsd_prefix = etl\n"
        "metrics_block_list = scheduler,taskstate.asset\n"
    )
    env = {"AIRFLOW_CONFIG": str(cfg), "AIRFLOW__METRICS__STATSD_HOST": "metrics.internal"}
    settings = MetricsSettings.load(env)
    assert (settings.statsd_on, settings.statsd_host, settings.statsd_port) == (
        True,
        "metrics.internal",
        9125,
    )
    assert settings.statsd_prefix == "etl" and not settings.otel_on
    assert settings.allows("taskstate.task.get")
    assert not settings.allows("taskstate.asset.get")


def run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


def statsd_env(tmp_path: Path, listener: socket.socket) -> dict[str, str]:
    """`[metrics]` for a child process: StatsD to `listener`, flushed only at exit."""
    return {
        "AIRFLOW_HOME": str(tmp_path),
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(listener.getsockname()[1]),
        "AIRFLOW__METRICS__TASKSTATE_FLUSH_SECONDS": "3600",
    }


def test_a_plain_python_process_flushes_at_exit(tmp_path: Path, listener: socket.socket) -> None:
    """The whole path: `[metrics]` from the environment, the process's default metrics, no
    explicit flush (the interval is an hour): what the process did arrives when it exits."""
    env = statsd_env(tmp_path, listener)
    proc = run_python(
        f"""
        from taskstate import StateStore, TaskScope
        state = StateStore("sqlite:///{tmp_path}/s.db").task_state(TaskScope("d", "r", "t"))
        for i in range(50):
            state.set("k", i)
            state.get("k")
        """,
        env,
    )
    assert proc.returncode == 0, proc.stderr
    got = parsed(received(listener))
    assert got["airflow.taskstate.task.set.calls"] == (50.0, "c")
    assert got["airflow.taskstate.task.get.calls"] == (50.0, "c")


def test_spans_reach_the_in_memory_exporter_as_children_of_the_current_span(
    tmp_path: Path,
) -> None:
    """A tracer provider configured (as Airflow 3's `[traces] otel_on` does: the global one):
    each store call is a span, child of the span around it; metrics stay off."""
    proc = run_python(
        f"""
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from taskstate import StateStore, TaskScope, TaskStateStore
        from taskstate.errors import InvalidValueError
        from taskstate.metrics import Metrics

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        store = StateStore("sqlite:///{tmp_path}/s.db", metrics=Metrics())
        with trace.get_tracer("airflow").start_as_current_span("worker.task") as task_span:
            state = store.task_state(TaskScope("d", "r", "t"))
            assert type(state) is not TaskStateStore
            state.set("k", 1)
            state.get("k")
            try:
                state.set("k", float("nan"))
            except InvalidValueError:
                pass
        spans = exporter.get_finished_spans()
        parent = task_span.get_span_context().span_id
        for span in spans:
            attrs = dict(span.attributes or {{}})
            is_child = span.parent is not None and span.parent.span_id == parent
            print(span.name, attrs.get("taskstate.key"), attrs.get("taskstate.backend"),
                  span.status.status_code.name, is_child)
        """,
        {},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "taskstate.task.set k sqlite UNSET True",
        "taskstate.task.get k sqlite UNSET True",
        "taskstate.task.set k sqlite ERROR True",
        "worker.task None None UNSET False",
    ]


def test_otel_metrics_reach_an_in_memory_reader(tmp_path: Path) -> None:
    proc = run_python(
        f"""
        from opentelemetry import metrics
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from taskstate import StateStore, TaskScope
        from taskstate.metrics import Metrics, MetricsSettings

        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        ours = Metrics.from_settings(MetricsSettings(otel_on=True))
        state = StateStore("sqlite:///{tmp_path}/s.db", metrics=ours).task_state(
            TaskScope("d", "r", "t")
        )
        state.set("k", 1)
        state.get("k")
        state.get("k")
        ours.flush()
        data = reader.get_metrics_data()
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    for point in m.data.data_points:
                        value = getattr(point, "value", None)
                        if value is None:
                            value = point.count
                        print(m.name, dict(point.attributes), value)
        """,
        {},
    )
    assert proc.returncode == 0, proc.stderr
    lines = set(proc.stdout.splitlines())
    assert "taskstate.task.get.calls {'backend': 'sqlite'} 2" in lines, lines
    assert "taskstate.task.get {'backend': 'sqlite'} 1" in lines, lines  # one interval mean
    assert "taskstate.task.set.calls {'backend': 'sqlite'} 1" in lines, lines


def test_a_child_leaving_by_os_exit_flushes_at_logging_shutdown(
    tmp_path: Path, listener: socket.socket
) -> None:
    """As Airflow 2's forked task process leaves: `logging.shutdown()`, then `os._exit`
    (no atexit handlers)."""
    env = {
        "AIRFLOW_HOME": str(tmp_path),
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(listener.getsockname()[1]),
    }
    proc = run_python(
        f"""
        import logging, os
        from taskstate import StateStore, TaskScope
        state = StateStore("sqlite:///{tmp_path}/s.db").task_state(TaskScope("d", "r", "t"))
        pid = os.fork()
        if pid == 0:
            state.set("k", 1)
            logging.shutdown()
            os._exit(0)
        os.waitpid(pid, 0)
        os._exit(0)  # the parent sends nothing: it did nothing
        """,
        env,
    )
    assert proc.returncode == 0, proc.stderr
    got = parsed(received(listener))
    assert got["airflow.taskstate.task.set.calls"] == (1.0, "c")


def test_a_forked_child_does_not_send_its_parents_totals(
    tmp_path: Path, listener: socket.socket
) -> None:
    metrics = statsd_metrics(listener)
    acc = open_store(tmp_path, metrics).task_state(SCOPE)
    acc.get("k")
    pid = os.fork()
    if pid == 0:  # the child: one call of its own, then flush and leave
        try:
            acc.get("k")
            metrics.flush()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    child = parsed(received(listener))
    assert child["airflow.taskstate.task.get.calls"] == (1.0, "c")
    metrics.flush()
    assert parsed(received(listener))["airflow.taskstate.task.get.calls"] == (1.0, "c")


def exporter_names(datagrams: list[str], mappings: list[tuple[str, str, bool]]) -> set[str]:
    """What Prometheus's statsd_exporter calls each datagram: the first matching mapping's
    name (`*` = one dot-separated part; observer mappings match timers only), else its default
    (dots to underscores); an observer also has `_sum` and `_count`."""
    names = set()
    for line in datagrams:
        name, _, rest = line.partition(":")
        timer = rest.endswith("|ms")
        matching = (
            mapped
            for pattern, mapped, observer in mappings
            if re.match("^" + re.escape(pattern).replace(r"\*", "[^.]+") + "$", name)
            and (timer or not observer)
        )
        mapped = next(matching, name.replace(".", "_"))
        names |= {mapped, f"{mapped}_sum", f"{mapped}_count"} if timer else {mapped}
    return names


def test_the_grafana_dashboard_queries_only_metrics_we_send(
    tmp_path: Path, listener: socket.socket
) -> None:
    """docs/grafana-taskstate.json through docs/metrics.md's statsd_exporter mappings: every
    metric a panel queries is one taskstate sends."""
    metrics = statsd_metrics(listener)
    offload = OffloadBackend(f"file://{tmp_path}/objects", keep_versions_s=0)
    now = [1_000_000.0]
    store = open_store(tmp_path, metrics, worker_backend=offload, clock=lambda: now[0])
    for acc, other in (
        (store.task_state(SCOPE), store.task_state(SCOPE)),
        (store.asset_state(ASSET), store.asset_state(ASSET)),
    ):
        acc.set("k", 1)
        raced: list[int] = []

        def race(value: int, other: Any = other, raced: list[int] = raced) -> int:
            if not raced:  # another writer commits first: one retry
                raced.append(value)
                other.set("k", 5)
            return value + 1

        acc.update("k", race)
        acc.compare_and_set("k", 1, 2)
        with pytest.raises(InvalidValueError):
            acc.set("k", float("nan"))
    store.task_state(SCOPE).write("gone", 1, expires_at=now[0] + 1)
    now[0] += 10
    store.cleanup()
    metrics.count("taskstate.api.status.2xx")  # what the HTTP API adds (tests/api)
    metrics.timing("taskstate.api.request", 0.001)
    metrics.flush()
    doc = (REPO / "docs" / "metrics.md").read_text()
    mappings = [
        (pattern, name, "observer" in between)
        for pattern, between, name in re.findall(
            r'- match: "([^"]+)"\n(.*?)\s+name: "([^"]+)"', doc, re.DOTALL
        )
    ]
    assert len(mappings) == 7
    sent = exporter_names(received(listener), mappings)
    dashboard = json.loads((REPO / "docs" / "grafana-taskstate.json").read_text())
    queried = {
        metric
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for metric in re.findall(r"\b(?:airflow_)?taskstate_[a-z0-9_]+", target["expr"])
    }
    assert len(queried) > 10
    assert queried <= sent, sorted(queried - sent)
