"""The accessors' semantics: scopes, expiry, NEVER_EXPIRE, atomic updates, async twins — each
test run on a local store and on the same store over HTTP (`tests/stores.py`), unchanged."""

from __future__ import annotations

import asyncio
import copy
import pickle
import time
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Clock
from tests.stores import SIDES, Opened, Opener, opener

from taskstate import NEVER_EXPIRE, AssetScope, StateStore, TaskScope
from taskstate.errors import InvalidRetentionError, InvalidScopeError, InvalidValueError
from taskstate.settings import Settings

T = TaskScope("dag", "run", "task")
DAY = 86400.0


@pytest.fixture(params=SIDES)
def open_store(request: pytest.FixtureRequest, tmp_path: Path, clock: Clock) -> Iterator[Opener]:
    """`open_store(settings)`: a fresh store on the test's clock, local or over HTTP."""
    with ExitStack() as stack:
        yield opener(request.param, tmp_path, clock, stack)


@pytest.fixture
def opened(open_store: Opener) -> Opened:
    return open_store()


@pytest.fixture
def store(opened: Opened) -> StateStore:
    return opened.store


@pytest.fixture
def database(opened: Opened) -> StateStore:
    """Where the database is: the store itself, or the server's (cleanup runs there)."""
    return opened.database


def test_retries_share_state_and_runs_do_not(store: StateStore) -> None:
    store.task_state(T).set("cursor", 7)
    assert store.task_state(TaskScope("dag", "run", "task")).get("cursor") == 7
    assert store.task_state(TaskScope("dag", "run2", "task")).get("cursor") is None
    assert store.task_state(TaskScope("dag", "run", "other")).get("cursor") is None


def test_map_indices_are_isolated_and_clear_only_its_own(store: StateStore) -> None:
    for i in (-1, 0, 1, 10):
        store.task_state(TaskScope("dag", "run", "task", i)).set("cursor", i)
    store.task_state(TaskScope("dag", "run", "task", 1)).clear()
    got = [
        store.task_state(TaskScope("dag", "run", "task", i)).get("cursor") for i in (-1, 0, 1, 10)
    ]
    assert got == [-1, 0, None, 10]


def test_get_default_and_delete_is_noop(store: StateStore) -> None:
    acc = store.task_state(T)
    assert acc.get("missing") is None
    assert acc.get("missing", default=0) == 0
    acc.set("kept", 1)
    sibling = store.task_state(TaskScope("dag", "run", "task", 0))
    sibling.set("missing", 2)  # the same key in another scope
    acc.delete("missing")
    # Read back: nothing of this scope or another changed, and no row appeared for the key.
    assert acc.items() == [("kept", 1)]
    assert acc.entry("missing") is None
    assert sibling.items() == [("missing", 2)]


def test_default_retention_and_expired_reads_as_absent_before_cleanup(
    store: StateStore, database: StateStore, clock: Clock
) -> None:
    acc = store.task_state(T)
    acc.set("k", 1)  # default_retention_days = 30
    clock.now += 30 * DAY - 1
    assert acc.get("k") == 1
    clock.now += 1
    assert acc.get("k", "gone") == "gone"
    assert acc.keys() == [] and acc.items() == []
    assert database.backend.count_expired(clock.now) == 1  # still a row until cleanup


def test_retention_override_and_never_expire(store: StateStore, clock: Clock) -> None:
    acc = store.task_state(T)
    acc.set("week", 1, retention=timedelta(days=7))
    acc.set("never", 1, retention=NEVER_EXPIRE)
    clock.now += 8 * DAY
    assert acc.get("week") is None
    clock.now += 10_000 * 365 * DAY
    assert acc.get("never") == 1


@pytest.mark.parametrize(
    "equal",
    [
        copy.deepcopy(NEVER_EXPIRE),
        pickle.loads(pickle.dumps(NEVER_EXPIRE)),
        timedelta(days=999999999, seconds=86399, microseconds=999999),
        timedelta(days=3_000_000),
    ],
)
def test_never_expire_is_recognised_by_value(
    store: StateStore, database: StateStore, equal: timedelta
) -> None:
    acc = store.task_state(T)
    acc.set("k", 1, retention=equal)
    assert database.backend.get(T.namespace, "k").expires_at is None  # type: ignore[union-attr]


def test_a_never_expiring_key_outlives_every_cleanup(
    store: StateStore, database: StateStore, clock: Clock
) -> None:
    # Airflow 3.3 spells it `timedelta.max`; tests/airflow/test_coexistence.py checks that
    # Airflow's own NEVER_EXPIRE equals ours inside a real task.
    acc = store.task_state(T)
    acc.set("airflow", 1, retention=timedelta.max)
    acc.set("ours", 2, retention=NEVER_EXPIRE)
    acc.set("finite", 3, retention=timedelta(days=1))
    clock.now += 7000 * 365 * DAY  # the year ~8800: every finite retention has run out
    assert database.cleanup().deleted == 1
    assert (acc.get("airflow"), acc.get("ours"), acc.get("finite")) == (1, 2, None)


def test_long_but_finite_retention_expires(store: StateStore, clock: Clock) -> None:
    store.task_state(T).set("k", 1, retention=timedelta(days=10**6))  # year ~4764
    clock.now += 10**6 * DAY
    assert store.task_state(T).get("k") is None


@pytest.mark.parametrize("bad", [7, 7.0, "7d", True, timedelta(seconds=-1)])
def test_bad_retention_is_a_clear_error_and_writes_nothing(store: StateStore, bad: Any) -> None:
    acc = store.task_state(T)
    with pytest.raises(InvalidRetentionError, match="retention"):
        acc.set("k", 1, retention=bad)
    assert acc.get("k") is None
    if not isinstance(bad, timedelta):
        with pytest.raises(TypeError):
            acc.set("k", 1, retention=bad)


def test_zero_default_retention_days_means_never(open_store: Opener, clock: Clock) -> None:
    store = open_store(Settings(default_retention_days=0)).store
    store.task_state(T).set("k", 1)
    clock.now += 10**6 * DAY
    assert store.task_state(T).get("k") == 1


def test_asset_state_is_shared_and_never_expires(store: StateStore, clock: Clock) -> None:
    producer = store.asset_state(AssetScope(name="orders/daily", uri="s3://w/orders"))
    producer.set("watermark", "2026-01-01T00:00:00+00:00")
    clock.now += 10_000 * DAY
    consumer = store.asset_state(AssetScope(name="orders/daily"))
    assert consumer.get("watermark") == "2026-01-01T00:00:00+00:00"
    assert store.asset_state(AssetScope(uri="s3://w/orders")).get("watermark") is None
    with pytest.raises(TypeError):
        producer.set("k", 1, retention=NEVER_EXPIRE)  # type: ignore[call-arg]


def test_entries_that_share_a_writer_each_hold_their_own(
    store: StateStore, database: StateStore
) -> None:
    """A stored writer is parsed once per distinct text (the rows of a page share it), yet each
    entry's `updated_by` is its own dict, nested values included."""
    state = store.task_state(T)
    state.set("a", 1)
    state.set("b", 2)
    first, second = state.page().items
    assert first.updated_by is not None and first.updated_by == second.updated_by
    first.updated_by["kind"] = "changed"
    assert second.updated_by["kind"] != "changed"  # type: ignore[index]
    assert state.entry("a").updated_by["kind"] != "changed"  # type: ignore[union-attr]
    nested = database.task_state(T, writer={"kind": "x", "tags": ["t"]})
    nested.set("c", 1)
    nested.set("d", 1)
    one, two = nested.page(key_prefix="c").items + nested.page(key_prefix="d").items
    one.updated_by["tags"].append("u")  # type: ignore[index]
    assert two.updated_by == {"kind": "x", "tags": ["t"]}


def test_scopes_validate() -> None:
    with pytest.raises(InvalidScopeError):
        TaskScope("", "run", "task")
    with pytest.raises(InvalidScopeError):
        TaskScope("dag", "run", "task", -2)
    with pytest.raises(InvalidScopeError):
        AssetScope()
    assert hash(TaskScope("d", "r", "t")) == hash(TaskScope("d", "r", "t"))


def test_update_is_read_modify_write(store: StateStore) -> None:
    acc = store.task_state(T)
    assert acc.update("n", lambda n: n + 1, default=0) == 1
    assert acc.update("n", lambda n: n + 1, default=0) == 2
    assert acc.update("rows", lambda rows: [*rows, "a"], default=[]) == ["a"]
    assert acc.get("n") == 2


def test_update_sees_expired_value_as_default(store: StateStore, clock: Clock) -> None:
    acc = store.task_state(T)
    acc.set("n", 100, retention=timedelta(seconds=1))
    clock.now += 2
    assert acc.update("n", lambda n: n + 1, default=0) == 1


def test_failed_update_writes_nothing(store: StateStore) -> None:
    acc = store.task_state(T)
    acc.set("n", 1)
    with pytest.raises(ZeroDivisionError):
        acc.update("n", lambda n: n / 0)
    with pytest.raises(InvalidValueError):
        acc.update("n", lambda n: float("nan"))
    with pytest.raises(InvalidValueError):
        acc.update("n", lambda n: None)
    assert acc.get("n") == 1


def test_compare_and_set(store: StateStore) -> None:
    acc = store.asset_state(AssetScope(name="a"))
    assert acc.compare_and_set("k", None, {"v": 1}) is True  # None = absent
    assert acc.compare_and_set("k", None, {"v": 2}) is False
    assert acc.compare_and_set("k", {"v": 1}, {"v": 2}) is True
    assert acc.get("k") == {"v": 2}
    acc.set("flag", 1)
    assert acc.compare_and_set("flag", True, 5) is False  # JSON equality: true != 1
    assert acc.compare_and_set("flag", 1.0, 5) is False
    acc.set("d", {"a": 1, "b": 2})
    assert acc.compare_and_set("d", {"b": 2, "a": 1}, 0) is True  # key order is not identity


def test_keys_and_items(store: StateStore) -> None:
    acc = store.task_state(TaskScope("dag", "run", "task", 1))
    store.task_state(TaskScope("dag", "run", "task", 10)).set("other", 1)
    acc.set("b", [1])
    acc.set("a", {"x": None})
    assert acc.keys() == ["a", "b"]
    assert acc.items() == [("a", {"x": None}), ("b", [1])]


def test_async_twins(store: StateStore) -> None:
    task = store.task_state(T)
    asset = store.asset_state(AssetScope(name="a"))

    async def go() -> list[Any]:
        await task.aset("k", 1, retention=NEVER_EXPIRE)
        await asset.aset("k", 2)
        got = [await task.aget("k"), await asset.aget("k"), await task.aget("x", 0)]
        await task.adelete("k")
        await asset.aclear()
        return [*got, await task.aget("k"), await asset.aget("k")]

    assert asyncio.run(go()) == [1, 2, 0, None, None]


def test_store_opened_from_settings_url(
    opened: Opened, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__STATE_STORE__TASKSTATE_URL", opened.url)
    monkeypatch.setenv("AIRFLOW__STATE_STORE__TASKSTATE_TOKEN", opened.token)
    clock.now = time.time()  # StateStore() keeps time by the real clock
    StateStore().task_state(T).set("k", 1)
    assert opened.database.task_state(T).get("k") == 1


def test_default_file_is_under_airflow_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIRFLOW__STATE_STORE__TASKSTATE_URL", raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    StateStore().task_state(T).set("k", 1)
    assert (tmp_path / "taskstate.db").exists()
