"""The write ledger (docs/api.md, "Write ids"): a write re-sent with its write id is answered
with the first one's outcome and applied once — also when duplicates race, on SQLite and on
PostgreSQL (directly and through PgBouncer in transaction mode), with history on and off —
and `clean` forgets ids past the horizon in bounded batches.

The HTTP side (a lost answer re-sent through a proxy that drops it) is in
tests/backends/test_http.py; the whole fleet in tests/test_fleet.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tests.conftest import Clock

from taskstate import StateStore, TaskScope
from taskstate.backends.base import Entry, HistoryBackend, WriteRecorded
from taskstate.cleanup import WRITE_ID_HORIZON_S
from taskstate.errors import PreconditionFailedError
from taskstate.settings import Settings
from taskstate.stored import etag_of

SCOPE = TaskScope("d", "r", "t")
LANES = [
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("pgbouncer", marks=pytest.mark.postgres),  # transaction pooling
]


@pytest.fixture(params=LANES)
def lane(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=[0, 20], ids=["history-off", "history-on"])
def history(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture
def open_store(
    lane: str, history: int, clock: Clock, tmp_path: Any, request: pytest.FixtureRequest
) -> Iterator[Callable[[], StateStore]]:
    """Stores on one database of `lane` (each a process's own pool), on the test's clock."""
    if lane == "sqlite":
        url = f"sqlite:///{tmp_path}/state.db"
    else:
        url = request.getfixturevalue("fresh_postgres_url")
        with StateStore(url) as admin:
            admin.migrate()
        if lane == "pgbouncer":
            url = request.getfixturevalue("pgbouncer").route(url)
    opened: list[StateStore] = []

    def open_() -> StateStore:
        store = StateStore(url, settings=Settings(history_versions=history), clock=clock)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


def _increment(entry: Entry | None) -> tuple[Entry, int]:
    """Not conditional: applied twice, it counts twice."""
    n = 0 if entry is None else int(entry.value)
    return Entry(str(n + 1), None, '{"kind":"api","subject":"t"}'), n + 1


@pytest.mark.parametrize("present", [True, False], ids=["update", "create"])
def test_a_write_id_racing_itself_applies_once(
    open_store: Callable[[], StateStore], clock: Clock, present: bool
) -> None:
    """Eight requests with one write id at once (a client's re-send racing the first, each on
    its own connection): the increment lands once; every other request is told the first
    outcome (its ETag). A key absent before (no row to lock) races on the ledger's unique id."""
    stores = [open_store() for _ in range(8)]
    if present:
        stores[0].task_state(SCOPE).set("n", 10)
    backends = [store.backend for store in stores]
    assert all(isinstance(b, HistoryBackend) and b.records_writes for b in backends)
    start = threading.Barrier(len(backends))
    outcomes: list[Any] = []

    def send(backend: Any) -> None:
        start.wait()
        try:
            outcomes.append(
                backend.transact(SCOPE.namespace, "n", _increment, clock(), write_id="w-1")
            )
        except WriteRecorded as recorded:
            outcomes.append(recorded)

    threads = [threading.Thread(target=send, args=(b,)) for b in backends]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    expected = 11 if present else 1
    assert stores[0].task_state(SCOPE).get("n") == expected
    applied = [o for o in outcomes if not isinstance(o, WriteRecorded)]
    assert applied == [expected], outcomes
    row = backends[0].get(SCOPE.namespace, "n")
    assert row is not None
    told = {o.etag for o in outcomes if isinstance(o, WriteRecorded)}
    assert told == {etag_of(*row)}  # the first write's ETag, to every duplicate


def test_a_resent_conditional_write_gets_the_first_outcome_even_when_its_condition_fails(
    open_store: Callable[[], StateStore],
) -> None:
    """The accessor's write as the API's PUT calls it: the first request lands; its re-send
    names an ETag the key no longer has (and a create-if-absent for a key that now exists),
    yet is answered with the first ETag, not 412, and writes nothing. A conditional delete
    re-sent after it deleted the key is True, not 412. A new id is a new write."""
    store = open_store()
    state = store.task_state(SCOPE)
    created = state.write("lease", "w1", if_none_match=True, write_id="c-1")
    assert state.write("lease", "w1", if_none_match=True, write_id="c-1").etag == created.etag
    first = state.write("lease", "w2", if_match=created.etag, write_id="u-1")
    again = state.write("lease", "w2", if_match=created.etag, write_id="u-1")
    assert again.etag == first.etag and state.entry("lease").etag == first.etag  # type: ignore[union-attr]
    if store.history:
        assert [v.value for v in state.history("lease")] == ["w2", "w1"]
    with pytest.raises(PreconditionFailedError):
        state.write("lease", "w3", if_match=created.etag, write_id="u-2")
    with pytest.raises(PreconditionFailedError, match="another key"):
        state.write("other", "w3", write_id="u-1")
    assert state.delete_if("lease", first.etag, write_id="d-1")
    assert state.delete_if("lease", first.etag, write_id="d-1")  # re-sent: deleted by the first
    assert not state.delete_if("lease", first.etag, write_id="d-2")
    assert state.get("lease") is None and state.get("other") is None


def test_a_conditional_write_that_already_fails_does_not_queue_on_the_keys_lock(
    open_store: Callable[[], StateStore],
) -> None:
    """A hot key over HTTP: while one writer holds the key's lock, a PUT whose If-Match is
    already stale is 412 at once instead of waiting for the lock, holding a connection, to
    fail after it. A re-sent copy whose id is
    recorded still gets its first outcome."""
    store = open_store()
    state = store.task_state(SCOPE)
    stale = state.write("hot", 1).etag
    landed = state.write("hot", 2, if_match=stale, write_id="first")
    holding, release, loser_done = threading.Event(), threading.Event(), threading.Event()
    seen_done: list[bool] = []

    def hold(value: int) -> int:
        holding.set()
        release.wait(10)  # the loser, if it queued on the lock, is stuck until this runs out
        seen_done.append(loser_done.is_set())
        return value

    holder = threading.Thread(target=lambda: open_store().task_state(SCOPE).update("hot", hold))
    holder.start()
    try:
        assert holding.wait(30)
        with pytest.raises(PreconditionFailedError):
            state.write("hot", 3, if_match=stale, write_id="late")
        loser_done.set()
    finally:
        release.set()
        holder.join()
    assert seen_done == [True]  # answered while the lock was held
    assert state.write("hot", 2, if_match=stale, write_id="first").etag == landed.etag


def test_clean_forgets_write_ids_past_the_horizon_in_batches(
    open_store: Callable[[], StateStore], clock: Clock
) -> None:
    """Inside the horizon a re-send is answered from the ledger; `clean` forgets the ids past
    it (in batches of the given size), after which a re-send is a new write: its stale
    If-Match decides (412)."""
    store = open_store()
    state = store.task_state(SCOPE)
    old = state.write("k", 0, if_none_match=True, write_id="old-0")
    for n in range(1, 5):
        state.write("k", n, write_id=f"old-{n}")
    clock.now += WRITE_ID_HORIZON_S - 60
    state.write("k", 9, write_id="young")
    clock.now += 61  # the first five are past the horizon, "young" is not
    batches: list[int] = []
    result = store.cleanup(batch_size=2, on_batch=batches.append)
    assert result.write_ids_forgotten == 5
    assert batches[-3:] == [2, 2, 1]  # the ledger's batches come last (no offloading here)
    assert store.cleanup().write_ids_forgotten == 0
    young = state.entry("k")
    assert young is not None and young.value == 9
    assert state.write("k", 9, write_id="young").etag == young.etag  # still in the ledger
    with pytest.raises(PreconditionFailedError):
        state.write("k", 0, if_match=old.etag, write_id="old-0")
