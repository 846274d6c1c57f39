"""Aggregation: in-process totals under one lock, sent by a flush thread, at exit, at fork."""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from time import perf_counter
from typing import TYPE_CHECKING, cast

from taskstate.errors import ConfigError
from taskstate.metrics import (
    sinks as out,  # the sink classes, by module: `sinks` is a local name below
)
from taskstate.metrics.instrumentation import _CLASSES, A, _instrumented, active_tracer
from taskstate.metrics.names import COUNTER, GAUGE, MAX_NAME, OPERATIONS, TIMER, Tags, declared
from taskstate.metrics.settings import MetricsSettings
from taskstate.metrics.sinks import PrometheusSink, Sample, Sink, airflow_stats

if TYPE_CHECKING:
    from taskstate.cleanup import CleanupResult

LOG = logging.getLogger("taskstate.metrics")


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
        """Whether any sink is configured (off: nothing is recorded, the accessors are the plain
        classes)."""
        return bool(self.sinks)

    @classmethod
    def from_settings(cls, settings: MetricsSettings, *, prometheus: bool = False) -> Metrics:
        """Airflow's Stats when Airflow is loaded, has set it up, and `[metrics]` turns a client
        on; else StatsD and/or OpenTelemetry from the same options."""
        sinks: list[Sink] = []
        stats = out._ready_airflow_stats() if settings.statsd_on or settings.otel_on else None
        if stats is not None:
            sinks.append(out.AirflowSink(stats))
        else:
            if settings.statsd_on:
                try:
                    sinks.append(out.StatsdSink(settings))
                except ConfigError as exc:  # state must keep working without its metrics
                    LOG.warning("%s", exc)
            if settings.otel_on:
                try:
                    sinks.append(out.OtelSink(settings))
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
                metric = declared(name)  # once per series: the registry is the contract
                if metric is None or metric.kind != kind:
                    raise ValueError(
                        f"metric {name!r} ({kind}) is not declared in "
                        "taskstate.metrics.names.REGISTRY"
                    )
                found = self._series[key] = [0, 0.0]
            if self.sinks:
                self._ensure_flusher()
            return found

    def count(self, name: str, value: float = 1, tags: Tags = ()) -> None:
        """Add `value` to a declared counter until the next flush."""
        if self.sinks:
            slot = self.slot(name, tags, COUNTER)
            slot[0] += 1
            slot[1] += value

    def gauge(self, name: str, value: float, tags: Tags = ()) -> None:
        """Set a declared gauge; the last value before a flush is sent."""
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
        """Add one call of `seconds` to a declared timer (sent as the interval's mean, `.calls`
        and `.total_ms`)."""
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
        """Count what one `StateStore.cleanup` did: rows deleted, batches, orphan objects
        removed, and its longest batch."""
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
        """Count a call of `op` that raised, and the error by class."""
        self.metrics.count(f"taskstate.{self.kind}.{op}.errors", 1, self.tags)
        self.metrics.count(
            f"taskstate.errors.{_error_name(exc)}",
            1,
            (*self.tags, ("kind", self.kind), ("op", op)),
        )

    # -- taskstate.accessors.AccessorHook: the events inside an operation --------------------

    def encoded(self, text: str) -> None:
        """A value encoded for writing: its UTF-8 size into `value_bytes`."""
        if self.on:
            slot = self._value_bytes
            slot[1] += len(text.encode("utf-8", "surrogatepass"))
            slot[0] += 1

    def offloaded(self, text: str) -> None:
        """A value uploaded to object storage: `offload.bytes` and `offload.objects`."""
        if self.on:
            size = len(text.encode("utf-8", "surrogatepass"))
            self.metrics.count("taskstate.offload.bytes", size, self.tags)
            self.metrics.count("taskstate.offload.objects", 1, self.tags)

    def retried(self) -> None:
        """An atomic update ran again: `retries`."""
        self.event("retries")

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


def count_now(name: str, tags: Mapping[str, str]) -> None:
    """Count one event of a declared counter. Inside Airflow (its `Stats` loaded in this
    process) through Airflow's `Stats` at once, as Airflow 3.3 counts `resumable_job.*`; else
    into this process's `configured()` metrics, so StatsD, OpenTelemetry and Prometheus get
    it without Airflow too."""
    metric = declared(name)
    if metric is None or metric.kind != COUNTER:
        raise ValueError(f"counter {name!r} is not declared in taskstate.metrics.names.REGISTRY")
    stats = airflow_stats()
    if stats is not None:
        stats.incr(name, tags=dict(tags))
    else:
        configured().count(name, 1, tuple(tags.items()))
