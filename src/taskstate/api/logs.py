"""`taskstate serve --log-format text|json`: an access line per request, an audit line per write.

Two loggers: `taskstate.access` (method, path, status, milliseconds, client: `AccessLog`, in
front of the whole app) and `taskstate.audit` (who, what, scope, key — never the value:
`audit`, called by the state routes after a write or clear succeeded). `serve` points them,
uvicorn's own lines and the API's warnings at stderr in the chosen format (`log_config`, which
uvicorn also applies in each `--workers` process). Inside Airflow the loggers go wherever
Airflow's logging sends `taskstate.*`.

Under `serve` the lines are written behind (`write_behind`): a request's lines are handed to
the handlers once the event loop is done with that request (its answer sent), in order, in
the same thread (a writer thread would contend for the GIL with the loop). Each record is made
from a template, not by `Logger.info` (which looks up the caller and the same thread and
process details for every line), and the text and JSON formats reuse the second's timestamp.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
import weakref
from typing import Any, Final

from starlette.types import ASGIApp, Receive, Scope, Send

from taskstate.api.routes_metrics import observed
from taskstate.scope import AssetScope, TaskScope

ACCESS: Final = logging.getLogger("taskstate.access")
AUDIT: Final = logging.getLogger("taskstate.audit")
FORMATS: Final = ("text", "json")


class AccessLog:
    """One `taskstate.access` line per HTTP request, written once the answer has started."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Log one access line for an HTTP request once its answer starts; pass the rest on."""
        if scope["type"] != "http" or not ACCESS.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        def done(status: int) -> None:
            raw = scope.get("raw_path") or scope["path"].encode()
            query = scope.get("query_string") or b""
            client = scope.get("client")
            path = raw.decode("latin-1") + ("?" + query.decode("latin-1") if query else "")
            ms = round((time.perf_counter() - started) * 1000, 2)
            _line(ACCESS, _access, (client[0] if client else None, scope["method"], path,
                                    status, ms))  # fmt: skip

        await observed(self.app, scope, receive, send, done)


def _access(client: str | None, method: str, path: str, status: int, ms: float) -> _Line:
    fields = {"method": method, "path": path, "status": status, "ms": ms, "client": client}
    return '%s "%s %s" %s %.2fms', (client, method, path, status, ms), {
        "event": "access", **fields}  # fmt: skip


def audit(action: str, who: dict[str, Any], scope: Any, key: str | None) -> None:
    """One `taskstate.audit` line: `action` (set, patch, delete, clear, clear-all-map-indices)
    by `who` (the writer record) on `scope`'s `key` (None: the whole scope). Never the value."""
    if AUDIT.isEnabledFor(logging.INFO):
        _line(AUDIT, _audit, (action, who, scope, key))


def _audit(action: str, who: dict[str, Any], scope: Any, key: str | None) -> _Line:
    where = _scope(scope)
    fields = {"event": "audit", "action": action, "who": who, "scope": where, "key": key}
    return "%s by %s on %s%s", (
        action, json.dumps(who, sort_keys=True, separators=(",", ":")),
        " ".join(f"{k}={v}" for k, v in where.items()), "" if key is None else f" key={key!r}",
    ), fields  # fmt: skip


# -- writing lines: at once, or after the answer (`write_behind`) -----------------------------

_Line = tuple[str, tuple[Any, ...], dict[str, Any]]  # message, its arguments, the JSON fields
# The lines of this loop iteration, not handled yet (`write_behind`).
_deferred: list[tuple[logging.Logger, logging.LogRecord]] = []
_behind = False


def _line(logger: logging.Logger, build: Any, args: tuple[Any, ...]) -> None:
    """One INFO line, `build(*args)` giving its message and fields. Its record is made from a
    template (what `Logger.info` spends finding the caller and filling the same thread and
    process fields each time is skipped); under `write_behind`, handled once the event loop
    is done with the current request, else at once."""
    message, margs, fields = build(*args)
    record = logging.LogRecord.__new__(logging.LogRecord)
    record.__dict__.update(_template(logger))
    record.msg, record.args, record.fields = message, margs, fields
    record.created = now = time.time()
    record.msecs = int(now % 1 * 1000) + 0.0
    record.relativeCreated = (now - _STARTED) * 1000
    if _behind:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            if not _deferred:
                loop.call_soon(_handle_deferred)
            _deferred.append((logger, record))
            return
    logger.handle(record)


def _handle_deferred() -> None:
    records = _deferred[:]
    _deferred.clear()
    handlers = list(_BATCHING) if len(records) > 1 else []  # one write per batch
    for handler in handlers:
        handler.hold()
    try:
        for logger, record in records:
            logger.handle(record)
    finally:
        for handler in handlers:
            handler.release_held()


class BatchStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A `StreamHandler` (what `serve` logs to) that writes the lines a loop iteration
    deferred (`write_behind`) in one write and one flush, not one each."""

    def __init__(self, stream: Any = None) -> None:
        super().__init__(stream)
        self._held: list[str] | None = None
        _BATCHING.add(self)

    def hold(self) -> None:
        """Hold the lines emitted from now on until `release_held`, instead of writing each."""
        with self.lock:  # type: ignore[union-attr]
            self._held = []

    def emit(self, record: logging.LogRecord) -> None:
        """Write the record's line, or keep it for the batch while lines are held."""
        held = self._held
        if held is None:
            super().emit(record)
            return
        try:
            held.append(self.format(record) + self.terminator)
        except Exception:
            self.handleError(record)

    def release_held(self) -> None:
        """Stop holding, and write the held lines in one write and one flush."""
        with self.lock:  # type: ignore[union-attr]
            held, self._held = self._held, None
            if held:
                self.stream.write("".join(held))
                self.flush()


_BATCHING: weakref.WeakSet[BatchStreamHandler] = weakref.WeakSet()


_STARTED = time.time()
_TEMPLATES: dict[tuple[str, int, int], dict[str, Any]] = {}


def _template(logger: logging.Logger) -> dict[str, Any]:
    """The fields a record of `logger` made in this thread and process has, but its message
    and time (a real record's, made once per logger, thread and process)."""
    key = (logger.name, threading.get_ident(), os.getpid())
    found = _TEMPLATES.get(key)
    if found is None:
        record = logger.makeRecord(logger.name, logging.INFO, __file__, 0, "", (), None)
        found = _TEMPLATES[key] = dict(record.__dict__)
    return found


def write_behind() -> None:
    """From now on, access and audit lines made in an event loop are handled once the loop is
    done with the current request (after its answer was sent), not before (`taskstate
    serve`)."""
    global _behind
    _behind = True


def _scope(scope: Any) -> dict[str, Any]:
    if isinstance(scope, TaskScope):
        return {"dag_id": scope.dag_id, "run_id": scope.run_id, "task_id": scope.task_id,
                "map_index": scope.map_index}  # fmt: skip
    if isinstance(scope, AssetScope):
        return {"asset": scope.name} if scope.name is not None else {"asset_uri": scope.uri}
    return {}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC), level, logger, message, and the line's fields."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one JSON object on one line."""
        line: dict[str, Any] = {
            "time": f"{_second(record.created)}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(getattr(record, "fields", {}))
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class TextFormatter(logging.Formatter):
    """`2026-12-01T16:00:00.123Z INFO taskstate.access: 127.0.0.1 "GET /…" 200 0.41ms`."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s.%(msecs)03dZ %(levelname)s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        """The record's second in UTC, without the timezone offset (`2026-12-01T16:00:00`)."""
        return _second(record.created)  # UTC, as the JSON lines


def _second(created: float) -> str:
    """`created`'s second in UTC, `2026-12-01T16:00:00`: made once per second, not per line."""
    global _last_second
    second, text = _last_second
    if second != int(created):
        second = int(created)
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _last_second = second, text  # one tuple: a thread never reads half of an update
    return text


_last_second = (-1, "")


def log_config(level: str, fmt: str) -> dict[str, Any]:
    """`logging.config.dictConfig` for uvicorn's `log_config`: everything on stderr in `fmt`."""
    formatter = JsonFormatter if fmt == "json" else TextFormatter
    handler = {"class": f"{__name__}.BatchStreamHandler", "formatter": "taskstate",
               "stream": "ext://sys.stderr"}  # fmt: skip
    logger = {"handlers": ["default"], "level": level.upper(), "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"taskstate": {"()": f"{__name__}.{formatter.__name__}"}},
        "handlers": {"default": handler},
        "loggers": {
            "uvicorn": logger,
            "uvicorn.error": {"level": level.upper()},
            "uvicorn.access": {"handlers": [], "propagate": False},  # ours is taskstate.access
            "taskstate": logger,  # access and audit lines are info: --log-level warning
        },  # drops them (as bench/http_floor.py runs the server)
    }
