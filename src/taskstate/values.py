"""The value, key, name and retention rules — the one place every write path calls."""

from __future__ import annotations

import json
import math
import re
from datetime import timedelta
from enum import Enum
from typing import Any, TypeAlias

from taskstate.errors import (
    InvalidKeyError,
    InvalidRetentionError,
    InvalidValueError,
    KeyTypeError,
    TaskStateError,
    UnsupportedValueTypeError,
    ValueTooLargeError,
)
from taskstate.json_types import HINTS as _HINTS

JsonValue: TypeAlias = str | int | float | bool | list[Any] | dict[str, Any]

NEVER_EXPIRE: timedelta = timedelta.max
"""A retention that never expires; equal (and identical) to Airflow 3.3's `NEVER_EXPIRE`."""

MAX_KEY_LENGTH = 512
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Python refuses to turn an int of more than 4300 digits into text or back (CVE-2020-10735);
# a reader with the default limit could not load such a value, so it is refused on write.
MAX_INT_DIGITS = 4300
_INT_BOUND = 10**MAX_INT_DIGITS


def _where(path: str) -> str:
    return "value" + path


def _reject_type(obj: object, path: str) -> UnsupportedValueTypeError:
    name = type(obj).__name__
    hint = _HINTS.get(name)
    if hint is None:
        if isinstance(obj, Enum):
            hint = "store value.value (or value.name)"
        elif hasattr(obj, "isoformat"):  # pandas/pendulum timestamps
            hint = "store it as text: value.isoformat()"
        elif hasattr(obj, "item") and hasattr(obj, "dtype"):  # numpy scalars
            hint = "use value.item() to get a plain Python number"
        else:
            hint = "convert it to str, int, float, bool, list or dict first"
    return UnsupportedValueTypeError(
        f"{_where(path)} is a {name}, which JSON cannot store exactly; {hint}"
    )


def _valid(obj: object) -> bool:
    """The fast yes/no walk every write takes; paths are only built by `_problem` on a no."""
    kind = type(obj)
    if kind is str or kind is bool:
        return True
    if kind is int:
        return -_INT_BOUND < obj < _INT_BOUND  # type: ignore[no-any-return]
    if kind is float:
        return math.isfinite(obj)  # type: ignore[arg-type]
    if kind is list:
        for item in obj:  # type: ignore[attr-defined]  # noqa: SIM110 (a loop beats all() here)
            if item is not None and not _valid(item):
                return False
        return True
    if kind is dict:
        for k, item in obj.items():  # type: ignore[attr-defined]
            if type(k) is not str or (item is not None and not _valid(item)):
                return False
        return True
    return False


def _problem(obj: object, path: str, text_check: bool) -> TaskStateError | None:
    """The first rule `obj` breaks, naming where; `text_check` also looks for lone surrogates."""
    kind = type(obj)
    if isinstance(obj, str) and kind is str:
        return _bad_text(obj, path) if text_check else None
    if kind is bool:
        return None
    if isinstance(obj, int) and kind is int:
        if -_INT_BOUND < obj < _INT_BOUND:
            return None
        return InvalidValueError(
            f"{_where(path)} is an integer of more than {MAX_INT_DIGITS} digits, which Python "
            "cannot read back from JSON text; store it as a string: str(value)"
        )
    if isinstance(obj, float) and kind is float:
        if math.isfinite(obj):
            return None
        return InvalidValueError(
            f"{_where(path)} is {obj!r}; JSON has no NaN or Infinity — store a string "
            'such as "NaN" or leave the key out'
        )
    if isinstance(obj, list) and kind is list:
        for i, item in enumerate(obj):
            if item is not None and (found := _problem(item, f"{path}[{i}]", text_check)):
                return found
        return None
    if isinstance(obj, dict) and kind is dict:
        for k, item in obj.items():
            if type(k) is not str:
                return UnsupportedValueTypeError(
                    f"{_where(path)} has the {type(k).__name__} key {k!r}; JSON object keys "
                    f"are text — use str({k!r}) as the key"
                )
            if text_check and (found := _bad_text(k, f"{path} key {k!r}")):
                return found
            if item is not None and (found := _problem(item, f"{path}[{k!r}]", text_check)):
                return found
        return None
    return _reject_type(obj, path)


def _bad_text(text: str, path: str) -> InvalidValueError | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return InvalidValueError(
            f"{_where(path)} holds a lone surrogate {text[exc.start]!r} at index {exc.start}, "
            "which is not text; decode the source bytes with errors='replace' or fix the input"
        )
    return None


def encode_value(value: object) -> str:
    """Validate `value` and return its stored JSON text. Raises before anything is written.

    >>> encode_value({"cursor": 7, "name": "café"})
    '{"cursor":7,"name":"café"}'
    >>> encode_value({"at": (1, 2)})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    taskstate.errors.UnsupportedValueTypeError: value['at'] is a tuple, ...; use a list
    """
    if value is None:
        raise InvalidValueError(
            "the value is None; None cannot be stored — use delete(key) to remove a key, "
            'or store a sentinel such as "" or {}'
        )
    try:
        if not _valid(value):
            raise _problem(value, "", False) or UnsupportedValueTypeError("value is not JSON")
        text = _encode(value)
    except RecursionError:
        raise InvalidValueError("the value is nested too deeply to store as JSON") from None
    if not text.isascii():  # only non-ASCII text can hold a lone surrogate
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise _problem(value, "", True) or InvalidValueError("value is not text") from None
    return text


# Built once: json.dumps with any non-default argument builds a new encoder on every call.
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
decode_value = json.JSONDecoder().decode


def check_size(text: str, limit: int, key: str, *, offload_configured: bool) -> None:
    """Enforce `[state_store] max_value_storage_bytes` on the UTF-8 bytes actually stored."""
    if limit <= 0 or len(text) * 4 <= limit:  # 4 = the most bytes one char can take in UTF-8
        return
    size = len(text.encode("utf-8"))
    if size > limit:
        where = (
            "even after offloading"
            if offload_configured
            else "raise [state_store] max_value_storage_bytes (0 = no limit), or set "
            "[workers] state_store_backend to an offloading backend such as "
            "taskstate.backends.offload.OffloadBackend"
        )
        raise ValueTooLargeError(
            f"the value for key {key!r} is {size} bytes of JSON, over the limit of {limit} "
            f"bytes; {where}"
        )


def check_key(key: object) -> str:
    """The key, if it is one: a str of at most MAX_KEY_LENGTH characters with no character
    `name_problem` refuses; KeyTypeError / InvalidKeyError saying what to change otherwise."""
    if type(key) is not str:
        raise KeyTypeError(f"a key must be a str, got {type(key).__name__} {key!r}")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidKeyError(
            f"a key is at most {MAX_KEY_LENGTH} characters; this one has {len(key)} "
            f"(starts {key[:40]!r}) — use a short descriptive name"
        )
    problem = name_problem(key)
    if problem:
        raise InvalidKeyError(f"a key {problem}")
    return key


def name_problem(text: str) -> str | None:
    """What makes `text` unusable as a key or scope field (the rest of a sentence), or None.

    Names must be non-empty text every backend stores as given: no control characters
    (PostgreSQL refuses NUL, and \x1f separates namespace fields) and no lone surrogates
    (not encodable as UTF-8).
    """
    if not text:
        return "must not be empty"
    if _CONTROL.search(text):
        return f"must not contain control characters: {text!r}"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            return (
                f"must be text, but holds a lone surrogate {text[exc.start]!r} at index "
                f"{exc.start}: {text!r}; decode the source bytes with errors='replace'"
            )
    return None


def expires_at(retention: object, default_days: int, now: float) -> float | None:
    """Epoch seconds at which a task key expires, or None for never.

    NEVER_EXPIRE is recognised by value (a copy or an unpickled one counts); a retention so
    long that the expiry passes the last representable datetime also means never.
    """
    if retention is None:
        return None if default_days == 0 else now + default_days * 86400.0
    if not isinstance(retention, timedelta):
        raise InvalidRetentionError(
            f"retention must be a datetime.timedelta, NEVER_EXPIRE or None, got "
            f"{type(retention).__name__} {retention!r}; for days write timedelta(days=N)"
        )
    if retention < timedelta(0):
        raise InvalidRetentionError(
            f"retention must not be negative, got {retention!r}; use delete(key) to drop a key"
        )
    if retention == NEVER_EXPIRE:
        return None
    at = now + retention.total_seconds()
    return None if at > _LAST_DATETIME else at


# 9999-12-31T23:59:59Z: an expiry past the last datetime means never, not an overflow.
_LAST_DATETIME = 253402300799.0
