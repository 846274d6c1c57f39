"""State history (docs/history.md): versions per write, as_of reads, restore — on SQLite and
PostgreSQL, each used directly and over HTTP (the remote accessors through `taskstate serve`)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path

import pytest
from tests.api.server import running

from taskstate import StateStore, TaskScope, Version
from taskstate.api.serve import standalone_app
from taskstate.api.tokens import Claims, SigningKeys
from taskstate.backends.http import HttpBackend
from taskstate.errors import HistoryUnavailableError, NaiveDatetimeError, VersionNotFoundError
from taskstate.scope import AssetScope
from taskstate.settings import Settings

SCOPE = TaskScope("etl", "run_1", "load")
SECRET = "history-tests-secret-key-0123456789abcdef"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float = 10.0) -> datetime:
        """Move on; returns an instant strictly between the writes before and after."""
        self.now += seconds
        return datetime.fromtimestamp(self.now - seconds / 2, timezone.utc)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each test on both built-in backends (the history contract)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/s.db"
    return _postgres(request)


def _postgres(request: pytest.FixtureRequest) -> str:
    fresh: str = request.getfixturevalue("fresh_postgres_url")
    with StateStore(fresh, settings=Settings()) as store:
        store.migrate()
    return fresh


Maker = Callable[..., StateStore]


def local(url: str, clock: Clock, **options: int) -> StateStore:
    """A store where the database is (what `clean` needs)."""
    return StateStore(url, settings=dataclasses.replace(Settings(), **options), clock=clock)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres), "http"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Maker]:
    """`make(clock, **settings)`: a store on SQLite or PostgreSQL, or one over HTTP (the remote
    accessors, through the app `taskstate serve` serves on a SQLite store: what HTTP adds does
    not depend on the server's backend). Each call opens a new one on the same database, with
    its own settings."""
    url = _postgres(request) if request.param == "postgres" else f"sqlite:///{tmp_path}/s.db"
    with ExitStack() as stack:

        def open_(clock: Clock, **options: int) -> StateStore:
            settings = dataclasses.replace(Settings(), **options)
            database = stack.enter_context(StateStore(url, settings=settings, clock=clock))
            if request.param != "http":
                return database
            keys = SigningKeys([SECRET])
            base = stack.enter_context(running(standalone_app(database, keys)))
            token = keys.issue(Claims(subject="history-tests", admin=True))
            backend = HttpBackend(base + "/taskstate", token=token)
            remote = StateStore(settings=settings, backend=backend, clock=clock)
            return stack.enter_context(remote)

        yield open_


def test_every_changing_write_is_a_version_and_refused_ones_are_not(make: Maker) -> None:
    clock = Clock()
    store = make(clock)
    state = store.task_state(SCOPE)
    state.set("k", 1)
    clock.tick()
    state.update("k", lambda n: n + 1)
    clock.tick()
    assert state.compare_and_set("k", 2, 3)
    assert not state.compare_and_set("k", 99, 4)  # refused: no version
    with pytest.raises(ZeroDivisionError):
        state.update("k", lambda n: 1 / 0)
    state.delete("k")
    state.delete("k")  # no-op: no version
    history = state.history("k")
    assert [(v.version, v.op, v.value) for v in history] == [
        (4, "delete", None),
        (3, "compare_and_set", 3),
        (2, "update", 2),
        (1, "set", 1),
    ]
    assert isinstance(history[0], Version)
    with pytest.raises(dataclasses.FrozenInstanceError):
        history[0].value = 5  # type: ignore[misc]
    first = history[-1]
    assert first.updated_at.tzinfo is timezone.utc and first.updated_by is not None
    # The writer: the task locally; over HTTP the token's subject (the server's credentials)
    assert first.updated_by["kind"] in ("task", "api")
    assert history[0].updated_by == first.updated_by  # a delete records its writer too
    assert first.expires_at is not None and first.expires_at.tzinfo is timezone.utc
    state.set("k", "again")  # created again: the number goes on
    assert state.history("k", limit=1)[0].version == 5
    state.set("other", 1)
    state.clear()
    assert state.history("other")[0].op == "clear"


def test_as_of_reads_the_value_held_then(make: Maker) -> None:
    clock = Clock()
    store = make(clock)
    state = store.task_state(SCOPE)
    before = clock.tick()
    clock.tick()
    state.set("k", "a")
    at_a = clock.tick()
    state.set("k", "b")
    at_b = clock.tick()
    state.delete("k")
    after = clock.tick()
    assert state.get("k", "dflt", as_of=before) == "dflt"
    assert state.get("k", as_of=at_a) == "a"
    assert state.get("k", as_of=at_b) == "b"
    assert state.get("k", "gone", as_of=after) == "gone"
    assert asyncio.run(state.aget("k", as_of=at_a)) == "a"
    with pytest.raises(NaiveDatetimeError) as caught:
        state.get("k", as_of=datetime(2026, 1, 1))
    assert isinstance(caught.value, TypeError)


def test_history_is_bounded_and_as_of_past_the_window_is_unavailable(make: Maker) -> None:
    clock = Clock()
    store = make(clock, history_versions=3)
    state = store.task_state(SCOPE)
    early = clock.tick()
    clock.tick()
    state.set("k", 0)
    first = clock.tick()
    for n in range(1, 6):
        state.set("k", n)
        clock.tick()
    assert [v.version for v in state.history("k")] == [6, 5, 4]
    assert state.history("k", limit=10) == state.history("k")
    with pytest.raises(HistoryUnavailableError) as caught:
        state.get("k", as_of=first)
    assert isinstance(caught.value, LookupError)
    with pytest.raises(HistoryUnavailableError):
        state.get("k", as_of=early)  # version 1 was pruned: before it is unknown too
    # A lower setting caps what history() returns at once, before any clean.
    narrower = make(clock, history_versions=2).task_state(SCOPE)
    assert [v.version for v in narrower.history("k")] == [6, 5]


def test_restore_writes_a_version_back(make: Maker) -> None:
    clock = Clock()
    store = make(clock)
    asset = store.asset_state(AssetScope("s3://bucket/x"))
    asset.set("cursor", {"at": 1})
    asset.set("cursor", {"at": 999})
    restored = asset.restore("cursor", 1)
    assert restored.op == "restore" and restored.version == 3 and restored.value == {"at": 1}
    assert asset.get("cursor") == {"at": 1}
    asset.delete("cursor")
    asset.set("cursor", 5)
    assert asyncio.run(asset.arestore("cursor", 4)).value is None  # a deletion deletes
    assert asset.get("cursor") is None
    with pytest.raises(VersionNotFoundError) as caught:
        asset.restore("cursor", 42)
    assert isinstance(caught.value, KeyError)
    assert [v.op for v in asyncio.run(asset.ahistory("cursor", 2))] == ["restore", "set"]


def test_restore_task_undoes_a_clear(make: Maker) -> None:
    clock = Clock()
    store = make(clock)
    mapped = [store.task_state(TaskScope("etl", "run_1", "load", i)) for i in range(2)]
    mapped[0].set("a", 1)
    mapped[1].set("b", 2)
    good = clock.tick()
    mapped[0].set("a", 10)
    store.clear_task("etl", "run_1", "load")
    mapped[1].set("late", 3)  # created after `as_of`: goes
    # The preview (the UI's, before its confirmation) says so and writes nothing.
    assert store.restore_task_preview("etl", "run_1", "load", as_of=good) == [
        (0, "a", 1, None), (1, "b", 2, None), (1, "late", None, 3)
    ]  # fmt: skip
    assert store.restore_task_preview("etl", "run_1", "load", as_of=good, map_index=1) == [
        (1, "b", 2, None), (1, "late", None, 3)
    ]  # fmt: skip
    assert mapped[1].get("late") == 3
    assert store.restore_task("etl", "run_1", "load", as_of=good) == 2
    assert mapped[0].items() == [("a", 1)] and mapped[1].items() == [("b", 2)]
    assert mapped[0].history("a", 1)[0].op == "restore"


def test_history_off_keeps_nothing_and_refuses_the_past(make: Maker) -> None:
    clock = Clock()
    store = make(clock, history_versions=0)
    state = store.task_state(SCOPE)
    state.set("k", 1)
    assert state.history("k") == []
    with pytest.raises(HistoryUnavailableError):
        state.get("k", as_of=clock.tick())
    with pytest.raises(HistoryUnavailableError):
        state.restore("k", 1)


def test_clean_prunes_by_age_but_keeps_a_live_keys_newest(url: str) -> None:
    clock = Clock()
    store = local(url, clock, history_retention_days=1, default_retention_days=0)
    state = store.task_state(SCOPE)
    for n in range(5):
        state.set("k", n)
    clock.tick(3 * 86400)
    result = store.cleanup(batch_size=2)
    assert result.versions_pruned == 4
    assert [v.version for v in state.history("k")] == [5]
    state.set("k", 9)
    assert [v.version for v in state.history("k")] == [6, 5]


def test_expiry_by_cleanup_is_a_version(url: str) -> None:
    clock = Clock()
    store = local(url, clock, default_retention_days=1)
    state = store.task_state(SCOPE)
    state.set("k", 1)
    clock.tick(2 * 86400)
    store.cleanup()
    assert [(v.op, v.value) for v in state.history("k")] == [("expire", None), ("set", 1)]


def test_an_offloaded_object_stays_while_a_kept_version_refers_to_it(
    url: str, tmp_path: Path
) -> None:
    from taskstate.backends.offload import OffloadBackend

    clock = Clock()
    offload = OffloadBackend(f"file://{tmp_path}/objects", keep_versions_s=0)
    settings = dataclasses.replace(Settings(), history_versions=3)
    store = StateStore(url, settings=settings, worker_backend=offload, clock=clock)
    state = store.task_state(SCOPE)
    big = {"rows": ["x" * 100] * 2000}
    state.set("k", big)
    state.set("k", [1])
    state.delete("k")
    # Every value is offloaded (no threshold): versions 1 and 2 still refer to theirs.
    assert len(list(offload._objects(offload.root))) == 2
    assert state.restore("k", 1).value == big and state.get("k") == big  # version 4
    for n in range(3):
        state.set("k", n)  # versions 5-7: 1-4 fall out of the window of 3
    assert len(list(offload._objects(offload.root))) == 6
    assert store.cleanup().offloaded_orphans == 3
    assert len(list(offload._objects(offload.root))) == 3  # versions 5-7
    assert [v.value for v in state.history("k")] == [2, 1, 0]


def _moved(url: str, clock: Clock, lines: list[str], **options: int) -> StateStore:
    from taskstate.transfer import import_lines

    store = local(url, clock, **options)
    import_lines(store, lines)
    return store


def test_export_with_history_round_trips_and_numbers_stay_monotone(
    url: str, tmp_path: Path
) -> None:
    from taskstate.transfer import ImportFormatError, export_lines, import_lines, version_lines

    clock = Clock()
    source = local(f"sqlite:///{tmp_path}/source.db", clock)
    state = source.task_state(SCOPE)
    state.set("k", "a")
    between = clock.tick()
    state.set("k", "b")
    state.update("k", lambda v: v + "c")
    state.set("gone", 1)
    state.delete("gone")  # a deleted key: only its versions travel
    source.asset_state(AssetScope(name="orders")).set("w", 7)
    lines = [*export_lines(source), *version_lines(source)]
    assert len(lines) == 2 + 3 + 2 + 1

    clock.tick()
    target = _moved(url, clock, lines)
    moved = target.task_state(SCOPE)
    want = [(v.version, v.op, v.value, v.updated_at, v.updated_by) for v in state.history("k")]
    got = [(v.version, v.op, v.value, v.updated_at, v.updated_by) for v in moved.history("k")]
    assert got[1:] == want  # the same versions, numbers kept on a store that never saw the key
    assert (got[0][0], got[0][1], got[0][2]) == (4, "import", "bc")  # the arrival, on top
    assert moved.get("k", as_of=between) == "a"
    assert [(v.version, v.op) for v in moved.history("gone")] == [(2, "delete"), (1, "set")]
    assert moved.get("gone") is None
    orders = target.asset_state(AssetScope(name="orders"))
    assert [v.op for v in orders.history("w")] == ["import", "set"]

    # Into a store whose key has gone further: the file's versions come after its mark.
    clock.tick()
    for n in range(6):
        moved.set("k", n)  # versions 5-10
    import_lines(target, lines)
    numbers = [v.version for v in moved.history("k", limit=5)]
    assert numbers == [14, 13, 12, 11, 10]  # 11-13: the file's 1-3 shifted; 14: the import
    assert [v.value for v in moved.history("k", limit=4)] == ["bc", "bc", "b", "a"]

    # All or nothing: a bad version line writes no key and no version.
    before = moved.history("k")
    bogus = {**json.loads(lines[-1]), "op": "bogus"}
    with pytest.raises(ImportFormatError, match="op must be one of"):
        import_lines(target, [*lines, json.dumps(bogus)])
    with pytest.raises(ImportFormatError, match="twice"):
        import_lines(target, [*lines, lines[-1]])
    assert moved.history("k") == before

    # Bounded: a store keeping 2 versions keeps the newest 2 of the file's and the import.
    narrow = _moved(f"sqlite:///{tmp_path}/narrow.db", clock, lines, history_versions=2)
    assert [v.version for v in narrow.task_state(SCOPE).history("k", limit=10)] == [4, 3]
    assert narrow.task_state(SCOPE).get("k") == "bc"


@pytest.mark.postgres
def test_postgres_as_of_seeks_the_at_index_in_custom_and_generic_plans(
    fresh_postgres_url: str,
) -> None:
    """`get(as_of=)` is one seek of (namespace_md5, key_md5, updated_at, version) however many
    versions and keys there are; the statement is prepared, so its generic plan must seek it
    too (not walk the age index and filter)."""
    import psycopg

    from taskstate.backends import postgres

    with StateStore(fresh_postgres_url, settings=Settings()) as store:
        store.migrate()
    namespace = SCOPE.namespace
    sql = postgres._VERSIONS_AT
    for name, number in (("ns", 1), ("key", 2), ("at", 3), ("limit", 4)):
        sql = sql.replace(f"%({name})s", f"${number}")
    with psycopg.connect(fresh_postgres_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO taskstate_versions (namespace, key, version, value, updated_at, op) "
            "SELECT %s, 'k' || (g %% 500), g / 500 + 1, '1', 1000000 + g, 'set' "
            "FROM generate_series(0, 49999) g",
            (namespace,),
        )
        conn.execute("ANALYZE taskstate_versions")
        conn.execute(f"PREPARE as_of(text, text, float8, int) AS {sql}")
        literal = namespace.replace("'", "''")
        for mode in ("force_custom_plan", "force_generic_plan"):
            conn.execute(f"SET plan_cache_mode = {mode}")
            plan = "\n".join(
                row[0]
                for row in conn.execute(f"EXPLAIN EXECUTE as_of('{literal}', 'k7', 1025000.5, 1)")
            )
            assert "Index Scan Backward using taskstate_versions_at" in plan, (mode, plan)
            assert "Sort" not in plan, (mode, plan)
