"""taskstate errors → HTTP statuses, in FastAPI's shapes.

The table (which error, which status) is `taskstate.wire.ERRORS`, shared with the client; each
answer names the error's class in `X-Taskstate-Error`. A bad value or key is 422
`{"detail": [{"loc", "msg", "type"}]}` (what FastAPI answers for a malformed body), with the
Python error's message in `msg`, so an HTTP caller reads the same advice as a Python caller.
Every other error is `{"detail": "<message>"}`.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from taskstate.errors import TaskStateError
from taskstate.wire import error_headers, error_status


def _unprocessable(
    loc: tuple[str, ...], message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"detail": [{"loc": list(loc), "msg": message, "type": "value_error"}]},
        status_code=422,
        headers=headers,
    )


def _message(exc: BaseException) -> str:
    return str(exc.args[0]) if exc.args else str(exc)


async def _taskstate_error(request: Request, exc: Exception) -> JSONResponse:
    """The status and header of `taskstate.wire.ERRORS`; bad input in FastAPI's 422 shape."""
    assert isinstance(exc, TaskStateError)
    code, loc = error_status(exc)
    headers = error_headers(exc)
    if loc is not None:
        return _unprocessable(loc, _message(exc), headers)
    return JSONResponse({"detail": _message(exc)}, status_code=code, headers=headers)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's own 422, except that an `input` JSON cannot carry is left out rather than
    failing the response with a 500."""
    assert isinstance(exc, RequestValidationError)
    return JSONResponse({"detail": [_portable(e) for e in exc.errors()]}, status_code=422)


def _portable(error: Any) -> Any:
    try:  # NaN, or bytes that are not UTF-8 (both ValueErrors), cannot go out as JSON
        encoded = jsonable_encoder(error)
        json.dumps(encoded, allow_nan=False)
    except ValueError:
        return {k: jsonable_encoder(error[k]) for k in ("type", "loc", "msg") if k in error}
    return encoded


def install(app: FastAPI) -> None:
    app.add_exception_handler(TaskStateError, _taskstate_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
