"""Python types JSON cannot store exactly, and what to store instead: the one table.

The write path (`taskstate.values`) names the fix when it refuses a value, and `taskstate lint`
(TS501) names the same fix before the code runs; both read it from here, so their advice cannot
drift. Keys are type names (`type(obj).__name__`); in `advice` and `rewrite`, `value` stands for
the object.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NonJson:
    """A non-JSON type people try to store, and what to do about it: how messages name it, the
    advice, and (when there is one) the JSON value to store instead."""

    what: str  # how a message names such a value: "a datetime"
    advice: str  # what to do instead, in words
    rewrite: str | None = None  # the JSON value to store, as an expression of `value`


_AS_TEXT = "store it as text: value.isoformat()"

NON_JSON: dict[str, NonJson] = {
    "datetime": NonJson("a datetime", _AS_TEXT, "value.isoformat()"),
    "date": NonJson("a date", _AS_TEXT, "value.isoformat()"),
    "time": NonJson("a time", _AS_TEXT, "value.isoformat()"),
    "timedelta": NonJson(
        "a timedelta", "store seconds: value.total_seconds()", "value.total_seconds()"
    ),
    "tuple": NonJson("a tuple", "use a list", "list(value)"),
    "set": NonJson("a set", "use a sorted list", "sorted(value)"),
    "frozenset": NonJson("a set", "use a sorted list", "sorted(value)"),
    "bytes": NonJson("bytes", "decode it (value.decode()) or base64-encode it", "value.decode()"),
    "bytearray": NonJson("bytes", "decode it or base64-encode it", "value.decode()"),
    "Decimal": NonJson(
        "a Decimal", "use str(value) to keep every digit, or float(value)", "str(value)"
    ),
    "UUID": NonJson("a UUID", "use str(value)", "str(value)"),
    "Path": NonJson("a Path", "use str(value)", "str(value)"),
    "PosixPath": NonJson("a Path", "use str(value)", "str(value)"),
    "object": NonJson("an object", "convert it to str, int, float, bool, list or dict first"),
}

HINTS: dict[str, str] = {name: kind.advice for name, kind in NON_JSON.items()}
"""Type name -> advice, the form the write path's error messages use."""
