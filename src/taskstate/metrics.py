"""Metrics and tracing: one facade over Airflow's `Stats`, StatsD, OpenTelemetry and Prometheus.

Where metrics go is decided once per process from Airflow's `[metrics]` options
(`statsd_on`, `statsd_host`, `statsd_port`, `statsd_prefix`, `statsd_influxdb_enabled`,
`otel_on`, `metrics_allow_list`, `metrics_block_list`), read the way every other taskstate
option is read (`taskstate.settings.airflow_option`):

- Airflow loaded in this process (a task, the api-server): Airflow's own `Stats`, so its
  prefix, tagging and allow/block lists apply unchanged;
- otherwise StatsD over UDP with the `statsd` package (extra `metrics`), and OpenTelemetry
  metrics when `otel_on` and the SDK is installed;
- `taskstate serve` also keeps cumulative totals for `/taskstate/metrics` (Prometheus text).

The hot path pays for none of this when metrics are off: `StateStore.task_state()` then
returns the plain accessor class. When they are on it returns a subclass made here whose
methods time the call and add it to in-process totals under one lock; a daemon thread sends
the totals every `[metrics] taskstate_flush_seconds` (default 10) and at exit — one datagram
per metric per interval, never one per call. A timer is sent as the interval's mean, with
`.calls` and `.total_ms` counters beside it: rates and call-weighted mean latencies
(`total_ms / calls`) stay exact whatever the StatsD server does with timer samples.

Tracing: when an OpenTelemetry tracer provider is configured (Airflow 3's `[traces] otel_on`
configures the global one), each store call is a span, a child of the current span (Airflow's
task span inside a task). A fault in any sink is logged and never fails the caller.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import logging
import os
import re
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from time import perf_counter
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from taskstate.errors import ConfigError
from taskstate.scope import AssetScope
from taskstate.settings import airflow_option

if TYPE_CHECKING:
    from taskstate.accessors import _Accessor
    from taskstate.backends.base import Entry
    from taskstate.cleanup import CleanupResult
    from taskstate.store import StateStore

LOG = logging.getLogger("taskstate.metrics")

A = TypeVar("A", bound="_Accessor")
F = TypeVar("F", bound=Callable[..., Any])

# Operation -> the accessor method that every public twin (set/aset, update, …) goes through.
OPERATIONS: dict[str, str] = {
    "get": "get",
    "set": "_set",
    "delete": "delete",
    "clear": "clear",
    "update": "_update",
    "compare_and_set": "_compare_and_set",
    "write": "write",
}
MAX_NAME = 63  # StatsD/Airflow limit: names shorter than 64 characters

TIMER, COUNTER, GAUGE = "timer", "counter", "gauge"

Tags = tuple[tuple[str, str], ...]


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


# -- settings ---------------------------------------------------------------------------------


def _flag(raw: str | None, option: str) -> bool:
    text = (raw or "").strip().lower()
    if text in ("true", "t", "1", "yes", "on"):
        return True
    if text in ("false", "f", "0", "no", "off", ""):
        return False
    raise ConfigError(f"[metrics] {option} must be True or False, got {raw!r}")


def _patterns(raw: str | None) -> tuple[str, ...]:
    return tuple(p.strip().lower() for p in (raw or "").split(",") if p.strip())


@dataclass(frozen=True)
class MetricsSettings:
    """Airflow's `[metrics]` options taskstate honours, plus its own flush interval."""

    statsd_on: bool = False
    statsd_host: str = "localhost"
    statsd_port: int = 8125
    statsd_prefix: str = "airflow"
    influxdb_tags: bool = False
    otel_on: bool = False
    allow_list: tuple[str, ...] = ()
    block_list: tuple[str, ...] = ()
    flush_seconds: float = 10.0

    @classmethod
    def load(cls, environ: Mapping[str, str] | None = None) -> MetricsSettings:
        def get(option: str) -> str | None:
            return airflow_option("metrics", option, environ)

        port = (get("statsd_port") or "8125").strip()
        flush = (get("taskstate_flush_seconds") or "10").strip()
        try:
            port_number, flush_seconds = int(port), float(flush)
        except ValueError:
            raise ConfigError(
                f"[metrics] statsd_port must be a port number and taskstate_flush_seconds a "
                f"number of seconds, got {port!r} and {flush!r}"
            ) from None
        if flush_seconds <= 0:
            raise ConfigError(f"[metrics] taskstate_flush_seconds must be > 0, got {flush!r}")
        return cls(
            statsd_on=_flag(get("statsd_on"), "statsd_on"),
            statsd_host=(get("statsd_host") or "localhost").strip(),
            statsd_port=port_number,
            statsd_prefix=(get("statsd_prefix") or "airflow").strip(),
            influxdb_tags=_flag(get("statsd_influxdb_enabled"), "statsd_influxdb_enabled"),
            otel_on=_flag(get("otel_on"), "otel_on"),
            allow_list=_patterns(get("metrics_allow_list")),
            block_list=_patterns(get("metrics_block_list")),
            flush_seconds=flush_seconds,
        )

    def allows(self, name: str) -> bool:
        """Airflow's list semantics: each entry is a pattern searched in the name."""
        lower = name.lower()
        if self.allow_list:
            return any(re.search(p, lower) for p in self.allow_list)
        return not any(re.search(p, lower) for p in self.block_list)


# -- sinks ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One metric's totals over a flush interval (a timer's `total` is seconds)."""

    name: str
    tags: Tags
    kind: str
    count: int
    total: float


class Sink(Protocol):
    def send(self, samples: list[Sample]) -> None: ...


class AirflowSink:
    """Airflow's `Stats`: its prefix, tagging and allow/block lists apply."""

    def __init__(self, stats: Any) -> None:
        self._stats = stats

    def send(self, samples: list[Sample]) -> None:
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


# -- the facade -------------------------------------------------------------------------------


class Metrics:
    """Where this process's metrics go. `Metrics()` records nothing; see `configured()`."""

    def __init__(
        self,
        sinks: list[Sink] | None = None,
        *,
        flush_seconds: float = 10.0,
        prometheus: PrometheusSink | None = None,
    ) -> None:
        self.sinks: list[Sink] = list(sinks or [])
        self.prometheus = prometheus
        if prometheus is not None:
            self.sinks.append(prometheus)
        self.flush_seconds = flush_seconds
        self._lock = threading.Lock()
        self._series: dict[tuple[str, Tags, str], list[float]] = {}
        self._sent: dict[tuple[str, Tags, str], tuple[float, float]] = {}
        self._meters: dict[tuple[str, str], OpMeter] = {}
        self._flusher_pid: int | None = None
        self._on_logging_shutdown: logging.Handler | None = None
        self._stop = threading.Event()
        if self.sinks:
            os.register_at_fork(after_in_child=self._after_fork)

    @property
    def enabled(self) -> bool:
        return bool(self.sinks)

    @classmethod
    def from_settings(cls, settings: MetricsSettings, *, prometheus: bool = False) -> Metrics:
        """Airflow's Stats when Airflow is loaded, has set it up, and `[metrics]` turns a client
        on; else StatsD and/or OpenTelemetry from the same options."""
        sinks: list[Sink] = []
        stats = _ready_airflow_stats() if settings.statsd_on or settings.otel_on else None
        if stats is not None:
            sinks.append(AirflowSink(stats))
        else:
            if settings.statsd_on:
                try:
                    sinks.append(StatsdSink(settings))
                except ConfigError as exc:  # state must keep working without its metrics
                    LOG.warning("%s", exc)
            if settings.otel_on:
                try:
                    sinks.append(OtelSink(settings))
                except ImportError:
                    LOG.warning("[metrics] otel_on is set but opentelemetry is not installed")
        return cls(
            sinks,
            flush_seconds=settings.flush_seconds,
            prometheus=PrometheusSink() if prometheus else None,
        )

    # -- recording ------------------------------------------------------------------------
    # A slot is [count, total], cumulative and never reset: callers add to it without a lock
    # (with CPython's GIL, `slot[i] += x` on a list of numbers calls nothing that could let
    # another thread run in between), and
    # `drain` sends the difference from what it sent last.

    def slot(self, name: str, tags: Tags = (), kind: str = COUNTER) -> list[float]:
        """The running totals [count, total] of one metric, created on first use."""
        sent = name + ".total_ms" if kind == TIMER else name  # the longest name sent for it
        if len(sent) > MAX_NAME:
            raise ValueError(f"metric name longer than {MAX_NAME} characters: {sent!r}")
        key = (name, tags, kind)
        with self._lock:
            found = self._series.get(key)
            if found is None:
                found = self._series[key] = [0, 0.0]
            if self.sinks:
                self._ensure_flusher()
            return found

    def count(self, name: str, value: float = 1, tags: Tags = ()) -> None:
        if self.sinks:
            slot = self.slot(name, tags, COUNTER)
            slot[0] += 1
            slot[1] += value

    def gauge(self, name: str, value: float, tags: Tags = ()) -> None:
        if self.sinks:
            slot = self.slot(name, tags, GAUGE)
            slot[1] = value
            slot[0] += 1

    @contextmanager
    def timer(self, name: str, tags: Tags = ()) -> Iterator[None]:
        """Time a block (rare operations: cleanup, import); free when metrics are off."""
        if not self.sinks:
            yield
            return
        start = perf_counter()
        try:
            yield
        finally:
            self.timing(name, perf_counter() - start, tags)

    def timing(self, name: str, seconds: float, tags: Tags = ()) -> None:
        if self.sinks:
            slot = self.slot(name, tags, TIMER)
            slot[1] += seconds
            slot[0] += 1

    def meter(self, kind: str, backend: str) -> OpMeter:
        """The pre-resolved slots of one accessor kind on one backend."""
        key = (kind, backend)
        found = self._meters.get(key)
        if found is None:
            found = self._meters[key] = OpMeter(self, kind, backend)
        return found

    # -- flushing ----------------------------------------------------------------------------

    def drain(self) -> list[Sample]:
        """What was recorded since the last drain (a gauge: its latest value)."""
        samples: list[Sample] = []
        with self._lock:
            for key, slot in self._series.items():
                count, total = slot
                sent_count, sent_total = self._sent.get(key, (0, 0.0))
                if count != sent_count:
                    name, tags, kind = key
                    value = total if kind == GAUGE else total - sent_total
                    samples.append(Sample(name, tags, kind, int(count - sent_count), value))
                    self._sent[key] = (count, total)
        return samples

    def flush(self) -> None:
        """Send what was recorded since the last flush to every sink."""
        samples = self.drain()
        if not samples:
            return
        for sink in self.sinks:
            try:
                sink.send(samples)
            except Exception:  # a metrics fault must never fail the work it observes
                LOG.warning("taskstate metrics: %s could not send", type(sink).__name__)

    def prometheus_text(self) -> str:
        """Cumulative totals as Prometheus text (only with `prometheus=True`)."""
        if self.prometheus is None:
            raise RuntimeError("this Metrics keeps no Prometheus totals (prometheus=False)")
        self.flush()
        return self.prometheus.render()

    def close(self) -> None:
        """Stop the flush thread and send what is left."""
        self._stop.set()
        self.flush()

    def _ensure_flusher(self) -> None:  # called with self._lock held
        pid = os.getpid()
        if self._flusher_pid == pid:
            return
        self._flusher_pid = pid
        # Registered in this process (Airflow 3's task process runs the atexit handlers that
        # were registered after its fork).
        atexit.register(self.flush)
        if self._on_logging_shutdown is None:
            self._on_logging_shutdown = _FlushOnLoggingShutdown(self)
        threading.Thread(target=self._run, name="taskstate-metrics", daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(self.flush_seconds):
            self.flush()

    def _after_fork(self) -> None:
        # What the parent recorded is the parent's to send (the child's accessors made before
        # the fork keep their slots); a lock held at fork time would stay held.
        self._lock = threading.Lock()
        self._sent = {key: (slot[0], slot[1]) for key, slot in self._series.items()}
        self._flusher_pid = None

    # -- accessors ---------------------------------------------------------------------------

    def accessor_class(self, cls: type[A]) -> type[A]:
        """The class `StateStore` instantiates: `cls` itself when metrics are off and no
        tracer is configured (no wrapper at all), else an instrumented subclass."""
        tracer = active_tracer()
        if not self.sinks and tracer is None:
            return cls
        key = (cls, tracer is not None)
        made = _CLASSES.get(key)
        if made is None:
            made = _CLASSES[key] = _instrumented(cls, tracer is not None)
        return cast("type[A]", made)

    def cleanup_done(self, result: CleanupResult) -> None:
        if not self.sinks:
            return
        self.count("taskstate.cleanup.rows_deleted", result.deleted)
        self.count("taskstate.cleanup.batches", result.batches)
        self.count("taskstate.cleanup.offload_orphans", result.offloaded_orphans)
        self.gauge("taskstate.cleanup.longest_batch_ms", result.longest_batch_s * 1000)


class _FlushOnLoggingShutdown(logging.Handler):
    """Flushes the metrics when `logging.shutdown()` runs. Airflow 2's forked task process
    leaves through `os._exit`, which skips atexit handlers, right after `logging.shutdown()`;
    that flushes every handler ever created, attached to a logger or not (this one is not:
    it never sees a record)."""

    def __init__(self, metrics: Metrics) -> None:
        super().__init__()
        self._metrics = metrics

    def emit(self, record: logging.LogRecord) -> None:
        pass

    def flush(self) -> None:
        self._metrics.flush()


class OpMeter:
    """One accessor kind on one backend: its slots resolved once, so a call only adds."""

    def __init__(self, metrics: Metrics, kind: str, backend: str) -> None:
        self.metrics = metrics
        self.kind = kind
        self.backend = backend
        self.tags: Tags = (("backend", backend),)
        self.on = metrics.enabled
        # Tracing only (metrics off): private slots nobody sends, so the wrappers never branch.
        self.timers: dict[str, list[float]] = {
            op: metrics.slot(f"taskstate.{kind}.{op}", self.tags, TIMER) if self.on else [0, 0.0]
            for op in OPERATIONS
        }
        self._value_bytes = (
            metrics.slot(f"taskstate.{kind}.value_bytes", self.tags) if self.on else [0, 0.0]
        )

    def error(self, op: str, exc: BaseException) -> None:
        self.metrics.count(f"taskstate.{self.kind}.{op}.errors", 1, self.tags)
        self.metrics.count(
            f"taskstate.errors.{_error_name(exc)}",
            1,
            (*self.tags, ("kind", self.kind), ("op", op)),
        )

    def value(self, text: str) -> None:
        if self.on:
            slot = self._value_bytes
            slot[1] += len(text.encode("utf-8", "surrogatepass"))
            slot[0] += 1

    def offloaded(self, text: str) -> None:
        if self.on:
            size = len(text.encode("utf-8", "surrogatepass"))
            self.metrics.count("taskstate.offload.bytes", size, self.tags)
            self.metrics.count("taskstate.offload.objects", 1, self.tags)

    def event(self, what: str) -> None:
        """A counted event of this accessor kind (conflicts, retries)."""
        self.metrics.count(f"taskstate.{self.kind}.{what}", 1, self.tags)


def _error_name(exc: BaseException) -> str:
    """The error's class name if it is taskstate's or a builtin (a bounded set), else "other":
    a user's `update` function may raise anything, and tags must stay low-cardinality."""
    cls = type(exc)
    if cls.__module__ in ("taskstate.errors", "builtins"):
        return cls.__name__[: MAX_NAME - len("taskstate.errors.")]
    return "other"


# -- tracing ----------------------------------------------------------------------------------


def active_tracer() -> Any:
    """A tracer if OpenTelemetry is loaded and a real tracer provider is configured."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return None
    global _tracer
    if _tracer is None or _tracer[0] is not provider:  # a tracer per call costs microseconds
        _tracer = (provider, provider.get_tracer("taskstate"))
    return _tracer[1]


_tracer: tuple[Any, Any] | None = None


# -- the instrumented accessor classes --------------------------------------------------------


_CLASSES: dict[tuple[type[Any], bool], type[Any]] = {}


def _instrumented(cls: type[Any], traced: bool) -> type[Any]:
    """A subclass of `cls` whose operations are timed (and traced): made once per class."""
    namespace: dict[str, Any] = {
        "__init__": _init,
        "_encode": _encode,
        "_offload": _offload,
        "_commit_if_unchanged": _commit_if_unchanged,
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
    }
    for op, method in OPERATIONS.items():
        fn = getattr(cls, method)
        wrapped = _timed(fn, op)
        namespace[method] = _traced(wrapped, op) if traced else wrapped
    return type(cls.__name__, (cls,), namespace)


def _init(self: Any, store: StateStore, scope: Any, writer: Any = None) -> None:
    super(type(self), self).__init__(store, scope, writer)
    kind = "asset" if isinstance(scope, AssetScope) else "task"
    self._meter = store.metrics.meter(kind, backend_tag(store))
    self._span_attributes = {"taskstate.backend": self._meter.backend}


def backend_tag(store: StateStore) -> str:
    """A backend's short, low-cardinality name: its URL scheme (sqlite, postgresql, http).
    Worked out once per backend, not per accessor (a server builds one per request)."""
    found: str | None = _TAGS.get(store.backend)
    if found is None:
        scheme, sep, _ = store.describe().partition(":")
        found = scheme if sep and scheme.isidentifier() else type(store.backend).__name__
        _TAGS[store.backend] = found
    return found


_TAGS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


# The wrapper takes the wrapped method's own parameters: forwarding `*args, **kwargs` costs as
# much again as the timing itself (~0.4 µs on a 5 µs get), so it is generated per signature.
_TIMED = """
def {name}(self, {params}):
    _slot = self._meter.timers[{op!r}]
    _start = _perf_counter()
    try:
        _result = _wrapped(self, {args})
    except Exception as _exc:
        self._meter.error({op!r}, _exc)
        raise
    finally:
        _slot[1] += _perf_counter() - _start
        _slot[0] += 1
    {after}
    return _result
"""
_AFTER = {"compare_and_set": "if _result is False: self._meter.event('compare_and_set.conflicts')"}


def _timed(fn: F, op: str) -> F:
    params: list[str] = []
    args: list[str] = []
    env: dict[str, Any] = {"_wrapped": fn, "_perf_counter": perf_counter}
    keyword_only = False
    for p in list(inspect.signature(fn).parameters.values())[1:]:
        if p.kind is p.KEYWORD_ONLY and not keyword_only:
            params.append("*")
            keyword_only = True
        default = ""
        if p.default is not p.empty:
            env[f"_default_{p.name}"] = p.default
            default = f"=_default_{p.name}"
        # Parameter names never start with "_" here, so they cannot shadow the template's.
        params.append(p.name + default)
        args.append(f"{p.name}={p.name}" if keyword_only else p.name)
    source = _TIMED.format(
        name=fn.__name__,
        params=", ".join(params),
        args=", ".join(args),
        op=op,
        after=_AFTER.get(op, ""),
    )
    exec(source, env)  # our own template, as dataclasses builds __init__
    wrapper = env[fn.__name__]
    functools.update_wrapper(wrapper, fn)
    return cast(F, wrapper)


def _traced(fn: F, op: str) -> F:
    @functools.wraps(fn)
    def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
        tracer = active_tracer()
        if tracer is None:
            return fn(self, *args, **kwargs)
        name = f"taskstate.{self._meter.kind}.{op}"
        attributes = dict(self._span_attributes)
        if args and isinstance(args[0], str):
            attributes["taskstate.key"] = args[0]
        with tracer.start_as_current_span(name, attributes=attributes):
            return fn(self, *args, **kwargs)

    return traced  # type: ignore[return-value]


def _encode(self: Any, key: str, value: object) -> str:
    text: str = super(type(self), self)._encode(key, value)
    self._meter.value(text)
    return text


def _offload(self: Any, key: str, text: str, uploaded: list[str]) -> str:
    before = len(uploaded)
    stored: str = super(type(self), self)._offload(key, text, uploaded)
    if len(uploaded) > before:
        self._meter.offloaded(text)
    return stored


def _commit_if_unchanged(
    self: Any, key: str, seen: Entry | None, entry: Entry, uploaded: list[str], op: str
) -> bool:
    done: bool = super(type(self), self)._commit_if_unchanged(key, seen, entry, uploaded, op)
    if not done:
        self._meter.event("retries")
    return done


# -- the process's metrics ----------------------------------------------------------------------

_configured: Metrics | None = None
_configure_lock = threading.Lock()


def configured(*, prometheus: bool = False) -> Metrics:
    """This process's metrics, built from `[metrics]` on first use. `prometheus=True` (the
    `taskstate serve` process) also keeps totals for `/taskstate/metrics`."""
    global _configured
    with _configure_lock:
        if _configured is None or (prometheus and _configured.prometheus is None):
            if _configured is not None:
                _configured.close()
            _configured = Metrics.from_settings(MetricsSettings.load(), prometheus=prometheus)
        return _configured
