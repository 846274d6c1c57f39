"""The value rules: every valid JSON value round-trips exactly; every invalid one raises the
right type, names where, and writes nothing."""

from __future__ import annotations

import decimal
import math
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.stores import SIDES, opener

from taskstate import StateStore, TaskScope
from taskstate.errors import (
    InvalidKeyError,
    InvalidValueError,
    KeyTypeError,
    UnsupportedValueTypeError,
    ValueTooLargeError,
)
from taskstate.settings import Settings
from taskstate.values import check_key, encode_value

SCOPE = TaskScope("dag", "run", "task")

json_scalars = (
    st.text()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.booleans()
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children | st.none(), max_size=5)
        | st.dictionaries(st.text(max_size=8), children | st.none(), max_size=5)
    ),
    max_leaves=20,
)


@pytest.fixture(scope="module", params=SIDES)
def shared_store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StateStore]:
    """One store per side for the module: local, and over HTTP (`tests/stores.py`)."""
    with ExitStack() as stack:
        root = tmp_path_factory.mktemp("values")
        yield opener(request.param, root, time.time, stack)(
            Settings(max_value_storage_bytes=0)
        ).store


@settings(max_examples=300, deadline=None)
@given(value=json_values)
def test_every_json_value_round_trips_exactly(shared_store: StateStore, value: Any) -> None:
    acc = shared_store.task_state(SCOPE)
    acc.set("k", value)
    got = acc.get("k")
    assert got == value
    assert _types(got) == _types(value)  # True stays bool, 1.0 stays float, lists stay lists


def _types(value: Any) -> Any:
    if isinstance(value, list):
        return [_types(v) for v in value]
    if isinstance(value, dict):
        return {k: _types(v) for k, v in value.items()}
    if isinstance(value, float) and math.isnan(value):
        return float
    return type(value)


bad_leaves = st.sampled_from(
    [
        (datetime(2026, 1, 1), UnsupportedValueTypeError, "isoformat"),
        (date(2026, 1, 1), UnsupportedValueTypeError, "isoformat"),
        (timedelta(1), UnsupportedValueTypeError, "total_seconds"),
        ((1, 2), UnsupportedValueTypeError, "list"),
        ({1, 2}, UnsupportedValueTypeError, "sorted list"),
        (b"x", UnsupportedValueTypeError, "decode"),
        (decimal.Decimal("1.5"), UnsupportedValueTypeError, "str"),
        (uuid.UUID(int=1), UnsupportedValueTypeError, "str"),
        (Path("/x"), UnsupportedValueTypeError, "str"),
        (object(), UnsupportedValueTypeError, "convert"),
        (float("nan"), InvalidValueError, "NaN"),
        (float("inf"), InvalidValueError, "NaN or Infinity"),
        (-math.inf, InvalidValueError, "NaN or Infinity"),
        ({1: "int key"}, UnsupportedValueTypeError, "str"),
        (10**4300, InvalidValueError, "more than 4300 digits"),
        (-(10**5000), InvalidValueError, "str(value)"),
    ]
)


@settings(max_examples=200, deadline=None)
@given(leaf=bad_leaves, path=st.lists(st.sampled_from(["list", "dict"]), max_size=4))
def test_invalid_values_raise_the_right_type_name_the_path_and_write_nothing(
    shared_store: StateStore, leaf: tuple[Any, type[Exception], str], path: list[str]
) -> None:
    bad, error, hint = leaf
    value: Any = bad
    where = ""
    for kind in reversed(path):
        if kind == "list":
            value, where = ["ok", value], f"[1]{where}"
        else:
            value, where = {"ok": 1, "rows": value}, f"['rows']{where}"
    acc = shared_store.task_state(SCOPE)
    acc.set("target", "before")
    with pytest.raises(error) as raised:
        acc.set("target", value)
    message = str(raised.value)
    assert f"value{where} " in message
    assert hint in message
    assert acc.get("target") == "before"


def test_none_value_is_a_value_error_but_nested_none_is_fine() -> None:
    with pytest.raises(InvalidValueError, match="delete"):
        encode_value(None)
    assert encode_value({"a": None, "b": [None]}) == '{"a":null,"b":[null]}'


def test_hints_for_common_data_engineering_types() -> None:
    import enum

    class Color(str, enum.Enum):
        RED = "red"

    with pytest.raises(UnsupportedValueTypeError, match=r"value\['c'\] is a Color.*value.value"):
        encode_value({"c": Color.RED})
    deep: list[Any] = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(InvalidValueError, match="nested too deeply"):
        encode_value(deep)


def test_lone_surrogates_are_a_value_error_naming_the_path() -> None:
    with pytest.raises(InvalidValueError, match=r"value\['rows'\]\[1\] holds a lone surrogate"):
        encode_value({"rows": ["ok", "bad \ud800"]})
    with pytest.raises(InvalidValueError, match="lone surrogate"):
        encode_value({"key \udfff": 1})
    assert encode_value("emoji 😀 ok") == '"emoji 😀 ok"'


def test_errors_are_builtin_subclasses() -> None:
    assert issubclass(InvalidValueError, ValueError)
    assert issubclass(UnsupportedValueTypeError, TypeError)
    assert issubclass(KeyTypeError, TypeError) and issubclass(KeyTypeError, ValueError)


def test_size_is_utf8_bytes_of_the_stored_json(tmp_path: Path) -> None:
    store = StateStore(f"sqlite:///{tmp_path}/s.db", settings=Settings(max_value_storage_bytes=10))
    acc = store.task_state(SCOPE)
    acc.set("fits", "12345678")  # "12345678" with quotes = 10 bytes
    with pytest.raises(ValueTooLargeError) as raised:
        acc.set("big", "éééé1")  # 4×2 + 1 + 2 quotes = 11 bytes, though only 7 characters
    message = str(raised.value)
    assert "11 bytes" in message and "limit of 10" in message
    assert "max_value_storage_bytes" in message and "state_store_backend" in message
    assert acc.get("big") is None
    unlimited = StateStore(store.backend.url, settings=Settings(max_value_storage_bytes=0))
    unlimited.task_state(SCOPE).set("big", "x" * 200_000)


@pytest.mark.parametrize(
    ("key", "error"),
    [
        ("", InvalidKeyError),
        ("x" * 513, InvalidKeyError),
        ("a\nb", InvalidKeyError),
        ("a\x00", InvalidKeyError),
        ("\x7f", InvalidKeyError),
        ("a\ud800b", InvalidKeyError),
        ("\udfff", InvalidKeyError),
        (5, KeyTypeError),
        (None, KeyTypeError),
        (b"k", KeyTypeError),
    ],
)
def test_bad_keys(key: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        check_key(key)


@pytest.mark.parametrize("key", [".", "..", "a/b", "%2F", "ключ", "名前", "x" * 512, "a.b.c"])
def test_path_like_and_non_ascii_keys_are_ordinary_keys(shared_store: StateStore, key: str) -> None:
    acc = shared_store.task_state(TaskScope("dag", "run", "keys"))
    acc.set("keep", 1)
    acc.set(key, "v")
    assert acc.get(key) == "v"
    acc.delete(key)
    assert acc.get(key) is None
    assert acc.get("keep") == 1


def test_integers_up_to_4300_digits_round_trip(shared_store: StateStore) -> None:
    acc = shared_store.task_state(SCOPE)
    for n in (10**4300 - 1, -(10**4300 - 1), 2**14000):
        acc.set("big", {"n": [n]})
        assert acc.get("big") == {"n": [n]}
    with pytest.raises(InvalidValueError, match=r"value\['n'\]\[0\] is an integer of more than"):
        acc.set("big", {"n": [10**4300]})
    assert acc.get("big") == {"n": [2**14000]}


def test_a_lone_surrogate_key_is_a_key_error_not_a_unicode_error(shared_store: StateStore) -> None:
    acc = shared_store.task_state(SCOPE)
    for call in (lambda: acc.set("k\ud800", 1), lambda: acc.get("k\ud800")):
        with pytest.raises(InvalidKeyError, match="lone surrogate"):
            call()
