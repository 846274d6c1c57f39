"""taskstate errors → HTTP statuses, in FastAPI's shapes.

A bad value or key is 422 `{"detail": [{"loc", "msg", "type"}]}` (what FastAPI answers for a
malformed body), with the Python error's message in `msg`, so an HTTP caller reads the same
advice as a Python caller. Every other error is `{"detail": "<message>"}`.
"""

from __future__ import annotations

from fastapi import FastAPI, Request, status
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


def unprocessable(loc: tuple[str, ...], message: str, kind: str = "value_error") -> JSONResponse:
    return JSONResponse(
        {"detail": [{"loc": list(loc), "msg": message, "type": kind}]},
        status_code=422,
    )


def _message(exc: BaseException) -> str:
    return str(exc.args[0]) if exc.args else str(exc)


async def _taskstate_error(request: Request, exc: Exception) -> JSONResponse:
    for kind, loc in _INPUT_ERRORS:
        if isinstance(exc, kind):
            return unprocessable(loc, _message(exc))
    for kind, code in _STATUS:
        if isinstance(exc, kind):
            return JSONResponse({"detail": _message(exc)}, status_code=code)
    return JSONResponse({"detail": _message(exc)}, status_code=500)


async def _too_deep(request: Request, exc: Exception) -> JSONResponse:
    # json.loads of a body nested thousands deep raises RecursionError, not a decode error.
    return unprocessable(("body",), "the JSON body is nested too deeply", "json_invalid")


def install(app: FastAPI) -> None:
    app.add_exception_handler(TaskStateError, _taskstate_error)
    app.add_exception_handler(RecursionError, _too_deep)
