"""Where samples go: Airflow's `Stats`, StatsD, OpenTelemetry, Prometheus text."""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from taskstate.errors import ConfigError
from taskstate.metrics.names import COUNTER, GAUGE, TIMER, Tags
from taskstate.metrics.settings import MetricsSettings

_AIRFLOW_STATS = (
    "airflow.sdk.observability.stats",  # Airflow 3.2+: tasks (set up by the task runner)
    "airflow.observability.stats",  # Airflow 3.2+: scheduler, api-server
    "airflow.stats",  # Airflow 2.x, 3.0, 3.1
)


def _stats_candidates() -> Iterator[Any]:
    """Airflow's Stats classes, if Airflow is already loaded (never imported here)."""
    if "airflow" not in sys.modules:
        return
    for module in _AIRFLOW_STATS:
        try:
            yield __import__(module, fromlist=["Stats"]).Stats
        except (ImportError, AttributeError):
            continue


def airflow_stats() -> Any:
    """Airflow's Stats, if Airflow is already loaded in this process (never imported here)."""
    return next(_stats_candidates(), None)


def _ready_airflow_stats() -> Any:
    """The first of Airflow's Stats that this process has set up (Airflow 3.2+'s task runner
    sets up the SDK's; an in-process `airflow dags test` sets up none, and a Stats nobody set
    up drops everything)."""
    for stats in _stats_candidates():
        try:
            factory = type.__getattribute__(stats, "factory")
            instance = type.__getattribute__(stats, "instance")
        except AttributeError:  # a Stats of another shape: trust it
            return stats
        if factory is not None or instance is not None:
            return stats
    return None


@dataclass(frozen=True)
class Sample:
    """One metric's totals over a flush interval (a timer's `total` is seconds)."""

    name: str
    tags: Tags
    kind: str
    count: int
    total: float


class Sink(Protocol):
    """Where samples go: each sink sends a flush interval's samples its way."""

    def send(self, samples: list[Sample]) -> None:
        """Send one flush interval's samples."""


class AirflowSink:
    """Airflow's `Stats`: its prefix, tagging and allow/block lists apply."""

    def __init__(self, stats: Any) -> None:
        self._stats = stats

    def send(self, samples: list[Sample]) -> None:
        """Each sample through Airflow's `Stats` (a timer as its mean, `.calls`, `.total_ms`)."""
        stats = self._stats
        for s in samples:
            tags = dict(s.tags)
            if s.kind == TIMER:
                stats.timing(s.name, timedelta(seconds=s.total / s.count), tags=tags)
                stats.incr(s.name + ".calls", s.count, tags=tags)
                stats.incr(s.name + ".total_ms", round(s.total * 1000, 3), tags=tags)
            elif s.kind == COUNTER:
                stats.incr(s.name, int(s.total), tags=tags)
            else:
                stats.gauge(s.name, s.total, tags=tags)


class StatsdSink:
    """The `statsd` package over UDP; tags InfluxDB-style in the name when enabled (as
    Airflow's `statsd_influxdb_enabled`), else dropped. One packet holds many metrics."""

    def __init__(self, settings: MetricsSettings) -> None:
        try:
            import statsd
        except ImportError:
            raise ConfigError(
                "[metrics] statsd_on is set but the statsd package is missing: "
                "pip install 'taskstate[metrics]'"
            ) from None
        self._client = statsd.StatsClient(
            settings.statsd_host, settings.statsd_port, prefix=settings.statsd_prefix or None
        )
        self._settings = settings

    def _name(self, name: str, tags: Tags) -> str:
        if not self._settings.influxdb_tags or not tags:
            return name
        return name + "".join(f",{k}={v}" for k, v in tags)

    def send(self, samples: list[Sample]) -> None:
        """The allowed samples in one UDP pipeline (a timer as its mean, `.calls`, `.total_ms`)."""
        with self._client.pipeline() as pipe:
            for s in samples:
                if not self._settings.allows(s.name):
                    continue
                name = self._name(s.name, s.tags)
                if s.kind == TIMER:
                    pipe.timing(name, s.total / s.count * 1000)
                    pipe.incr(self._name(s.name + ".calls", s.tags), s.count)
                    pipe.incr(self._name(s.name + ".total_ms", s.tags), round(s.total * 1000, 3))
                elif s.kind == COUNTER:
                    pipe.incr(name, int(s.total))
                else:
                    pipe.gauge(name, s.total)


class OtelSink:
    """OpenTelemetry metrics on the global meter provider: timers as histograms (ms, the
    interval's mean) beside `.calls` and `.total_ms` counters, counters, gauges."""

    def __init__(self, settings: MetricsSettings) -> None:
        from opentelemetry import metrics

        self._meter = metrics.get_meter("taskstate")
        self._instruments: dict[str, Any] = {}
        self._settings = settings

    def _instrument(self, name: str, kind: str) -> Any:
        found = self._instruments.get(name)
        if found is None:
            if kind == TIMER:
                found = self._meter.create_histogram(name, unit="ms")
            elif kind == COUNTER:
                found = self._meter.create_counter(name)
            else:
                found = self._meter.create_gauge(name)
            self._instruments[name] = found
        return found

    def send(self, samples: list[Sample]) -> None:
        """The allowed samples to the OpenTelemetry meter's instruments."""
        for s in samples:
            if not self._settings.allows(s.name):
                continue
            tags = dict(s.tags)
            if s.kind == TIMER:
                self._instrument(s.name, TIMER).record(s.total / s.count * 1000, tags)
                self._instrument(s.name + ".calls", COUNTER).add(s.count, tags)
                self._instrument(s.name + ".total_ms", COUNTER).add(s.total * 1000, tags)
            elif s.kind == COUNTER:
                self._instrument(s.name, COUNTER).add(s.total, tags)
            else:
                self._instrument(s.name, GAUGE).set(s.total, tags)


class PrometheusSink:
    """Cumulative totals since the process started, rendered as Prometheus text: timers as
    summaries in seconds (`_count`, `_sum`), counters as `_total`, gauges as they are."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: dict[tuple[str, Tags], list[float]] = {}
        self._kinds: dict[str, str] = {}

    def send(self, samples: list[Sample]) -> None:
        """Add the samples to the totals `render` shows (cumulative, as Prometheus expects)."""
        with self._lock:
            for s in samples:
                self._kinds[s.name] = s.kind
                slot = self._totals.setdefault((s.name, s.tags), [0, 0.0])
                if s.kind == GAUGE:
                    slot[0], slot[1] = 1, s.total
                else:
                    slot[0] += s.count
                    slot[1] += s.total

    def render(self) -> str:
        """The totals since the process started, as Prometheus text format 0.0.4."""
        lines: list[str] = []
        with self._lock:
            by_name: dict[str, list[tuple[Tags, list[float]]]] = {}
            for (name, tags), slot in sorted(self._totals.items()):
                by_name.setdefault(name, []).append((tags, list(slot)))
            kinds = dict(self._kinds)
        for name, series in by_name.items():
            base = re.sub(r"[^a-zA-Z0-9_]", "_", name)
            kind = kinds[name]
            if kind == TIMER:
                lines.append(f"# TYPE {base}_seconds summary")
            elif kind == COUNTER:
                lines.append(f"# TYPE {base}_total counter")
            else:
                lines.append(f"# TYPE {base} gauge")
            for tags, (count, total) in series:
                labels = _labels(tags)
                if kind == TIMER:
                    lines.append(f"{base}_seconds_count{labels} {int(count)}")
                    lines.append(f"{base}_seconds_sum{labels} {total!r}")
                elif kind == COUNTER:
                    lines.append(f"{base}_total{labels} {total!r}")
                else:
                    lines.append(f"{base}{labels} {total!r}")
        return "\n".join(lines) + "\n"


def _labels(tags: Tags) -> str:
    if not tags:
        return ""
    escaped = (
        (k, v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')) for k, v in tags
    )
    return "{" + ",".join(f'{k}="{v}"' for k, v in escaped) + "}"
