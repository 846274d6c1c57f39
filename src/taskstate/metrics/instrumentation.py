"""Accessor instrumentation: timing, error counts and spans around every store operation."""

from __future__ import annotations

import functools
import inspect
import sys
import weakref
from collections.abc import Callable
from time import perf_counter
from typing import TYPE_CHECKING, Any, TypeVar, cast

from taskstate.metrics.names import OPERATIONS
from taskstate.scope import AssetScope

if TYPE_CHECKING:
    from taskstate.accessors import _Accessor
    from taskstate.backends.base import Entry
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
    self: Any, key: str, seen: Entry | None, entry: Entry, uploaded: list[str]
) -> bool:
    done: bool = super(type(self), self)._commit_if_unchanged(key, seen, entry, uploaded)
    if not done:
        self._meter.event("retries")
    return done
