"""`taskstate serve --log-format text|json`: an access line per request, an audit line per write.

Two loggers: `taskstate.access` (method, path, status, milliseconds, client: `AccessLog`, in
front of the whole app) and `taskstate.audit` (who, what, scope, key — never the value:
`audit`, called by the state routes after a write or clear succeeded). `serve` points them,
uvicorn's own lines and the API's warnings at stderr in the chosen format (`log_config`, which
uvicorn also applies in each `--workers` process). Inside Airflow the loggers go wherever
Airflow's logging sends `taskstate.*`.
"""

from __future__ import annotations

import json
import logging
import time
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
        if scope["type"] != "http" or not ACCESS.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        def done(status: int) -> None:
            raw = scope.get("raw_path") or scope["path"].encode()
            query = scope.get("query_string") or b""
            client = scope.get("client")
            fields = {
                "method": scope["method"],
                "path": raw.decode("latin-1") + ("?" + query.decode("latin-1") if query else ""),
                "status": status,
                "ms": round((time.perf_counter() - started) * 1000, 2),
                "client": client[0] if client else None,
            }
            ACCESS.info(
                '%s "%s %s" %s %.2fms', fields["client"], fields["method"], fields["path"],
                status, fields["ms"], extra={"fields": {"event": "access", **fields}},
            )  # fmt: skip

        await observed(self.app, scope, receive, send, done)


def audit(action: str, who: dict[str, Any], scope: Any, key: str | None) -> None:
    """One `taskstate.audit` line: `action` (set, patch, delete, clear, clear-all-map-indices)
    by `who` (the writer record) on `scope`'s `key` (None: the whole scope). Never the value."""
    if not AUDIT.isEnabledFor(logging.INFO):
        return
    where = _scope(scope)
    fields = {"event": "audit", "action": action, "who": who, "scope": where, "key": key}
    AUDIT.info(
        "%s by %s on %s%s", action, json.dumps(who, sort_keys=True, separators=(",", ":")),
        " ".join(f"{k}={v}" for k, v in where.items()), "" if key is None else f" key={key!r}",
        extra={"fields": fields},
    )  # fmt: skip


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
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        line: dict[str, Any] = {
            "time": f"{stamp}.{int(record.msecs):03d}Z",
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

    converter = staticmethod(time.gmtime)  # UTC, as the JSON lines

    def __init__(self) -> None:
        super().__init__("%(asctime)s.%(msecs)03dZ %(levelname)s %(name)s: %(message)s",
                         "%Y-%m-%dT%H:%M:%S")  # fmt: skip


def log_config(level: str, fmt: str) -> dict[str, Any]:
    """`logging.config.dictConfig` for uvicorn's `log_config`: everything on stderr in `fmt`."""
    formatter = JsonFormatter if fmt == "json" else TextFormatter
    handler = {"class": "logging.StreamHandler", "formatter": "taskstate",
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
