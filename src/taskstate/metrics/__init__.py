"""Metrics and tracing: one facade over Airflow's `Stats`, StatsD, OpenTelemetry and Prometheus.

Where metrics go is decided once per process from Airflow's `[metrics]` options
(`statsd_on`, `statsd_host`, `statsd_port`, `statsd_prefix`, `statsd_influxdb_enabled`,
`otel_on`, `metrics_allow_list`, `metrics_block_list`), read the way every other taskstate
option is read (declared in `taskstate.settings.Settings`):

- Airflow loaded in this process (a task, the api-server): Airflow's own `Stats`, so its
  prefix, tagging and allow/block lists apply unchanged;
- otherwise StatsD over UDP with the `statsd` package (extra `metrics`), and OpenTelemetry
  metrics when `otel_on` and the SDK is installed;
- `taskstate serve` also keeps cumulative totals for `/taskstate/metrics` (Prometheus text).

The hot path pays for none of this when metrics are off: `StateStore.task_state()` then
returns the plain accessor class. When they are on it returns a subclass made through the
accessors' documented hook (`_Accessor.OPERATIONS` to wrap, `AccessorHook` for the events
inside an operation; the HTTP accessors keep both) whose methods time the call and add it to
in-process totals without a lock; a daemon thread sends
the totals every `[metrics] taskstate_flush_seconds` (default 10) and at exit — one datagram
per metric per interval, never one per call. A timer is sent as the interval's mean, with
`.calls` and `.total_ms` counters beside it: rates and call-weighted mean latencies
(`total_ms / calls`) stay exact whatever the StatsD server does with timer samples.

Tracing: when an OpenTelemetry tracer provider is configured (Airflow 3's `[traces] otel_on`
configures the global one), each store call is a span, a child of the current span (Airflow's
task span inside a task). A fault in any sink is logged and never fails the caller.

The package, bottom up: `names` (the registry of every metric: nothing else may be recorded),
`settings` (`[metrics]`), `sinks`, `instrumentation` (the accessor subclasses and tracing),
`aggregation` (`Metrics`, the flush thread, `configured()`, `count_now`).
"""

from __future__ import annotations

from taskstate.metrics.aggregation import Metrics, OpMeter, configured, count_now
from taskstate.metrics.instrumentation import active_tracer, backend_tag
from taskstate.metrics.names import (
    COUNTER,
    GAUGE,
    MAX_NAME,
    OPERATIONS,
    REGISTRY,
    TIMER,
    Metric,
    Tags,
    declared,
)
from taskstate.metrics.settings import MetricsSettings
from taskstate.metrics.sinks import (
    AirflowSink,
    OtelSink,
    PrometheusSink,
    Sample,
    Sink,
    StatsdSink,
    airflow_stats,
)

__all__ = [
    "COUNTER",
    "GAUGE",
    "MAX_NAME",
    "OPERATIONS",
    "REGISTRY",
    "TIMER",
    "AirflowSink",
    "Metric",
    "Metrics",
    "MetricsSettings",
    "OpMeter",
    "OtelSink",
    "PrometheusSink",
    "Sample",
    "Sink",
    "StatsdSink",
    "Tags",
    "active_tracer",
    "airflow_stats",
    "backend_tag",
    "configured",
    "count_now",
    "declared",
]
