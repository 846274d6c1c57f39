"""taskstate errors → HTTP statuses, in FastAPI's shapes.

A bad value or key is 422 `{"detail": [{"loc", "msg", "type"}]}` (what FastAPI answers for a
malformed body), with the Python error's message in `msg`, so an HTTP caller reads the same
advice as a Python caller. Every other error is `{"detail": "<message>"}`.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from taskstate.errors import (
    BackendUnavailableError,
    InvalidKeyError,
    InvalidRetentionError,
    InvalidScopeError,
    InvalidTokenError,
    InvalidValueError,
    KeyNotFoundError,
    PreconditionFailedError,
    TaskStateError,
    UnsupportedValueTypeError,
)

# Where in the request each kind of bad input came from (FastAPI's `loc`).
_INPUT_ERRORS: tuple[tuple[type[TaskStateError], tuple[str, ...]], ...] = (
    (InvalidKeyError, ("path", "key")),
    (InvalidScopeError, ("path",)),
    (InvalidRetentionError, ("body", "expires_at")),
    (InvalidValueError, ("body", "value")),
    (UnsupportedValueTypeError, ("body", "value")),
)
_STATUS: tuple[tuple[type[TaskStateError], int], ...] = (
    (KeyNotFoundError, status.HTTP_404_NOT_FOUND),
    (PreconditionFailedError, status.HTTP_412_PRECONDITION_FAILED),
    (InvalidTokenError, status.HTTP_401_UNAUTHORIZED),
    (BackendUnavailableError, status.HTTP_503_SERVICE_UNAVAILABLE),
)


def _unprocessable(loc: tuple[str, ...], message: str) -> JSONResponse:
    return JSONResponse(
        {"detail": [{"loc": list(loc), "msg": message, "type": "value_error"}]},
        status_code=422,
    )


def _message(exc: BaseException) -> str:
    return str(exc.args[0]) if exc.args else str(exc)


async def _taskstate_error(request: Request, exc: Exception) -> JSONResponse:
    for kind, loc in _INPUT_ERRORS:
        if isinstance(exc, kind):
            return _unprocessable(loc, _message(exc))
    for kind, code in _STATUS:
        if isinstance(exc, kind):
            return JSONResponse({"detail": _message(exc)}, status_code=code)
    return JSONResponse({"detail": _message(exc)}, status_code=500)


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
