"""taskstate errors → HTTP statuses, in FastAPI's shapes.

The table (which error, which status) is `taskstate.wire.ERRORS`, shared with the client; each
answer names the error's class in `X-Taskstate-Error`. A bad value or key is 422
`{"detail": [{"loc", "msg", "type"}]}` (what FastAPI answers for a malformed body), with the
Python error's message in `msg`, so an HTTP caller reads the same advice as a Python caller.
A failure of the store itself is 503 with `Retry-After` and no detail of the server's paths or
URLs. Every other error is `{"detail": "<message>"}`.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from starlette.responses import Response

from taskstate.errors import BackendError, OutcomeUnknownError, StaleTryError, TaskStateError
from taskstate.wire import error_headers, error_status

log = logging.getLogger("taskstate.api")


def dumps(body: Any) -> bytes:
    """JSON out, compact and UTF-8 (bodies are built from what the store returned)."""
    return _ENCODER.encode(body).encode("utf-8")


# One encoder: `json.dumps` with any non-default option builds a new one per call.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _message(exc: BaseException) -> str:
    return str(exc.args[0]) if exc.args else str(exc)


def taskstate_error(exc: TaskStateError) -> tuple[int, bytes, dict[str, str]]:
    """(status, JSON body, headers) for a taskstate error, by `taskstate.wire.ERRORS`. A
    failure of the store itself is a 503 the client may retry and says nothing of the server's
    paths or URLs; the server's log has the whole message."""
    code, loc = error_status(exc)
    headers = error_headers(exc)
    if loc is not None:
        error = {"loc": list(loc), "msg": _message(exc), "type": "value_error"}
        return 422, dumps({"detail": [error]}), headers
    if isinstance(exc, OutcomeUnknownError):
        log.warning("the state store lost a commit's answer: %s", exc)
        detail = (
            "the state store lost the answer to this write's commit (OutcomeUnknownError); it "
            "may or may not have been written: read the key before writing again"
        )
        return code, dumps({"detail": detail}), headers
    if isinstance(exc, BackendError) and not isinstance(exc, StaleTryError):
        log.warning("the state store failed: %s", exc)
        detail = (
            f"the state store could not serve this request ({type(exc).__name__}); nothing "
            "was written, retry"
        )
        return 503, dumps({"detail": detail}), {**headers, "Retry-After": "1"}
    if code >= 500:
        log.error("taskstate error answered %s: %s", code, exc)
        return code, dumps({"detail": f"the server failed ({type(exc).__name__})"}), headers
    return code, dumps({"detail": _message(exc)}), headers


async def _taskstate_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, TaskStateError)
    code, body, headers = taskstate_error(exc)
    return Response(body, code, headers, media_type="application/json")


def validation_body(exc: RequestValidationError) -> bytes:
    """FastAPI's own 422 body, except that an `input` JSON cannot carry is left out rather
    than failing the response with a 500."""
    return dumps({"detail": [_portable(e) for e in exc.errors()]})


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    return Response(validation_body(exc), 422, media_type="application/json")


def _portable(error: Any) -> Any:
    try:  # NaN, or bytes that are not UTF-8 (both ValueErrors), cannot go out as JSON
        encoded = jsonable_encoder(error)
        json.dumps(encoded, allow_nan=False)
    except ValueError:
        return {k: jsonable_encoder(error[k]) for k in ("type", "loc", "msg") if k in error}
    return encoded


def install(app: FastAPI) -> None:
    """Register the JSON handlers for `TaskStateError` and request validation errors on `app`."""
    app.add_exception_handler(TaskStateError, _taskstate_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
