"""The store's own operations, which the CLI, HTTP API, UI and transfer are clients of: live-row
listing and paging, discovery, conditional writes, clearing a task, restore and atomic import."""

from __future__ import annotations

import pytest
from tests.conftest import Clock

from taskstate import AssetScope, StateStore, TaskScope
from taskstate.backends.base import Row
from taskstate.cleanup import delete_expired
from taskstate.errors import (
    InvalidValueError,
    KeyNotFoundError,
    PreconditionFailedError,
    UnsupportedValueTypeError,
)
from taskstate.scope import ASSET_PREFIX, task_prefix
from taskstate.store import DEFAULT_EXPIRY, KEEP_EXPIRY, Page

T = TaskScope("dag", "run", "task")
DAY = 86400.0


def test_page_lists_live_keys_in_order_with_totals(store: StateStore, clock: Clock) -> None:
    state = store.task_state(T)
    for key in ("b", "a", "c", "ab"):
        state.set(key, key.upper())
    state.write("expired", 1, expires_at=clock.now - 1)
    store.task_state(TaskScope("dag", "run", "task", 10)).set("a", "other index")
    page = state.page(limit=2, offset=1)
    # "c" follows: the total is a lower bound (offset + limit + 1) unless counted on request.
    assert ([e.key for e in page.items], page.total, page.exact) == (["ab", "b"], 4, False)
    assert (state.page(limit=1, exact_total=True).total, state.page(limit=3).total) == (4, 4)
    assert state.page(limit=1).exact is False and state.page(limit=4).exact is True
    prefixed = state.page(key_prefix="a")
    assert ([(e.key, e.value) for e in prefixed.items], prefixed.total, prefixed.exact) == (
        [("a", "A"), ("ab", "AB")],
        2,
        True,
    )
    assert state.page(offset=10) == Page([], 4, True)


def test_entries_carry_metadata_and_the_writer(store: StateStore, clock: Clock) -> None:
    store.task_state(T).set("k", {"v": 1})
    ops = store.task_state(T, writer={"kind": "api", "subject": "ops"})
    ops.set("by_ops", 2)
    entry = store.task_state(T).entry("k")
    assert entry is not None
    assert (entry.value, entry.updated_at, entry.expires_at) == (
        {"v": 1},
        clock.now,
        clock.now + 30 * DAY,
    )
    assert entry.updated_by == {
        "kind": "task",
        "dag_id": "dag",
        "run_id": "run",
        "task_id": "task",
        "map_index": -1,
    }
    assert ops.entry("by_ops").updated_by == {"kind": "api", "subject": "ops"}  # type: ignore[union-attr]
    assert store.asset_state(AssetScope(name="a")).entry("absent") is None
    store.asset_state(AssetScope(name="a")).set("w", 1)
    assert store.asset_state(AssetScope(name="a")).entry("w").updated_by is None  # type: ignore[union-attr]


def test_discovery_lists_scopes_with_live_state(store: StateStore, clock: Clock) -> None:
    for scope in (T, TaskScope("dag", "run", "task", 3), TaskScope("dag", "run2", "t2")):
        store.task_state(scope).set("k", 1)
    store.task_state(TaskScope("dag", "run3", "t")).write("gone", 1, expires_at=clock.now - 1)
    store.task_state(TaskScope("other", "run", "t")).set("k", 1)
    store.task_state(T).set("k2", 1)
    store.asset_state(AssetScope(name="orders")).set("w", 1)
    found = list(store.scopes(task_prefix("dag")))
    assert found == [
        (T, 2),
        (TaskScope("dag", "run", "task", 3), 1),
        (TaskScope("dag", "run2", "t2"), 1),
    ]
    assert list(store.scopes(ASSET_PREFIX)) == [(AssetScope(name="orders"), 1)]
    keys = [(scope, entry.key) for scope, entry in store.entries(task_prefix("dag", "run"))]
    assert keys == [(T, "k"), (T, "k2"), (TaskScope("dag", "run", "task", 3), "k")]


def test_conditional_writes(store: StateStore) -> None:
    state = store.task_state(T)
    created = state.write("k", 1, if_none_match=True)
    with pytest.raises(PreconditionFailedError):
        state.write("k", 2, if_none_match=True)
    with pytest.raises(PreconditionFailedError):
        state.write("k", 2, if_match="not-the-etag")
    assert state.get("k") == 1
    changed = state.write("k", 2, if_match=created.etag)
    assert changed.etag != created.etag and state.get("k") == 2
    with pytest.raises(PreconditionFailedError):
        state.write("k", 3, if_match=created.etag)  # stale: someone wrote in between
    with pytest.raises(KeyNotFoundError):
        state.write("absent", 1, must_exist=True)
    assert state.get("absent") is None


def test_write_expiry_forms(store: StateStore, clock: Clock) -> None:
    state = store.task_state(T)
    assert state.write("never", 1, expires_at=None).expires_at is None
    assert state.write("default", 1, expires_at=DEFAULT_EXPIRY).expires_at == clock.now + 30 * DAY
    state.write("kept", 1, expires_at=clock.now + 5)
    assert (
        state.write("kept", 2, expires_at=KEEP_EXPIRY, must_exist=True).expires_at == clock.now + 5
    )
    assert state.entry("kept").expires_at == clock.now + 5  # type: ignore[union-attr]
    assert (
        store.asset_state(AssetScope(name="a")).write("w", 1, expires_at=clock.now + 5).expires_at
        is None
    )


def test_a_refused_write_writes_nothing(store: StateStore) -> None:
    state = store.task_state(T)
    with pytest.raises(InvalidValueError):
        state.write("k", float("nan"))
    with pytest.raises(UnsupportedValueTypeError):
        state.compare_and_set("k", (1, 2), [1])  # a tuple is not taken for a list
    state.set("k", [1, 2])
    with pytest.raises(UnsupportedValueTypeError):
        state.compare_and_set("k", (1, 2), [3])
    assert state.get("k") == [1, 2]
    assert state.keys() == ["k"]


def test_clear_task_across_map_indices_and_markers(store: StateStore) -> None:
    for index in (-1, 0, 1, 10):
        scope = TaskScope("dag", "run", "task", index)
        store.task_state(scope).set("k", index)
        store.meta(scope).set("attempt", {"try": 1})
    store.task_state(TaskScope("dag", "run", "task2")).set("k", 1)
    assert store.clear_task("dag", "run", "task", map_index=1) == 1
    assert store.meta(TaskScope("dag", "run", "task", 1)).get("attempt") is None
    assert store.meta(TaskScope("dag", "run", "task", 10)).get("attempt") == {"try": 1}
    assert store.clear_task("dag", "run", "task") == 3
    assert [s for s, _ in store.scopes(task_prefix("dag"))] == [TaskScope("dag", "run", "task2")]
    assert store.meta(T).get("attempt") is None


def test_accessor_clear_all_map_indices(store: StateStore) -> None:
    """The store's clear path without the markers: a task clears from inside a running try, and
    the other map indices' running tries keep their attempt markers. History records who."""
    for index in (-1, 0, 1):
        scope = TaskScope("dag", "run", "task", index)
        store.task_state(scope).set("k", 1)
        store.meta(scope).set("attempt", {"try": 1})
    store.task_state(TaskScope("dag", "run", "task", 0)).clear(all_map_indices=True)
    assert list(store.scopes()) == []
    assert store.meta(TaskScope("dag", "run", "task", 1)).get("attempt") == {"try": 1}
    cleared = store.task_state(TaskScope("dag", "run", "task", 1)).history("k")[0]
    assert cleared.op == "clear" and cleared.updated_by is not None
    assert cleared.updated_by["task_id"] == "task"


def test_an_expired_marker_reads_as_absent(store: StateStore, clock: Clock) -> None:
    store.meta(T).set("attempt", {"try": 1}, until=clock.now + 60)
    assert store.meta(T).get("attempt") == {"try": 1}
    clock.now += 60  # the expiry rule (`stored.is_live`): absent from the moment it expires
    assert store.meta(T).get("attempt") is None


def test_markers_are_not_state(store: StateStore) -> None:
    store.meta(T).set("attempt", {"try": 1})
    assert store.task_state(T).keys() == [] and list(store.entries()) == []


def test_restore_with_absolute_expiry(store: StateStore, clock: Clock) -> None:
    store.restore(T, "k", {"a": 1}, clock.now + 60)
    store.restore(AssetScope(name="a"), "w", 1, clock.now + 60)
    assert store.task_state(T).entry("k").expires_at == clock.now + 60  # type: ignore[union-attr]
    assert store.asset_state(AssetScope(name="a")).entry("w").expires_at is None  # type: ignore[union-attr]
    with pytest.raises(InvalidValueError):
        store.restore(T, "bad", float("inf"), None)


def test_import_entries_is_all_or_nothing(store: StateStore, clock: Clock) -> None:
    store.task_state(T).set("existing", "old")
    good = [(T, f"k{i}", i, None, None, None) for i in range(100)]
    with pytest.raises(InvalidValueError):
        store.import_entries([*good, (T, "bad", float("nan"), None, None, None)])
    assert store.task_state(T).keys() == ["existing"]
    assert (
        store.import_entries([*good, (T, "existing", "new", None, None, None)], replace=False)
        == 100
    )
    assert store.task_state(T).get("existing") == "old"
    assert store.import_entries([(T, "existing", "new", None, None, None)]) == 1
    assert store.task_state(T).get("existing") == "new"


def test_cleanup_batches_start_small_and_never_pass_the_batch_size(
    store: StateStore, clock: Clock
) -> None:
    """Paced cleanup: the first batch is 1,000 rows whatever the batch size (a writer waits
    for one batch at most), later ones grow while fast and never pass the size asked for."""
    ns = TaskScope("d", "r", "t").namespace
    store.backend.set_many(
        [Row(ns, f"k{i:05}", "1", clock.now - 1, clock.now) for i in range(5_000)]
    )
    sizes: list[int] = []
    result = delete_expired(store.backend, clock.now, batch_size=2_000, on_batch=sizes.append)
    assert result.deleted == sum(sizes) == 5_000
    assert sizes[0] == 1_000 and max(sizes) <= 2_000 and result.batches == len(sizes)
