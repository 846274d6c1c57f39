"""Accessor instrumentation: timing, error counts and spans around every store operation."""

from __future__ import annotations

import functools
import sys
import weakref
from collections.abc import Callable
from time import perf_counter
from typing import TYPE_CHECKING, Any, TypeVar, cast

from taskstate.scope import AssetScope

if TYPE_CHECKING:
    from taskstate.accessors import _Accessor
    from taskstate.store import StateStore

A = TypeVar("A", bound="_Accessor")
F = TypeVar("F", bound=Callable[..., Any])


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
    """A subclass of `cls` through the accessors' hook (`taskstate.accessors._Accessor`): each
    method of `cls.OPERATIONS` timed (and traced), and the accessor's `hook` set to the
    meter. Made once per class."""
    namespace: dict[str, Any] = {
        "__init__": _init,
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
    }
    for op, method in cls.OPERATIONS.items():
        fn = getattr(cls, method)
        wrapped = _timed(fn, op)
        namespace[method] = _traced(wrapped, op) if traced else wrapped
    return type(cls.__name__, (cls,), namespace)


def _init(self: Any, store: StateStore, scope: Any, writer: Any = None) -> None:
    super(type(self), self).__init__(store, scope, writer)
    kind = "asset" if isinstance(scope, AssetScope) else "task"
    self._meter = self.hook = store.metrics.meter(kind, backend_tag(store))
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


def _timed(fn: F, op: str) -> F:
    """`fn` timed into its meter's slot; an exception counted by class, a compare_and_set
    that wrote nothing counted as a conflict."""
    conflicts = op == "compare_and_set"

    @functools.wraps(fn)
    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        slot = self._meter.timers[op]
        start = perf_counter()
        try:
            result = fn(self, *args, **kwargs)
        except Exception as exc:
            self._meter.error(op, exc)
            raise
        finally:
            slot[1] += perf_counter() - start
            slot[0] += 1
        if conflicts and result is False:
            self._meter.event("compare_and_set.conflicts")
        return result

    return cast(F, timed)


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
