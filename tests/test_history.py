"""State history (docs/history.md): versions per write, as_of reads, restore — on SQLite and
PostgreSQL, each used directly and over HTTP (the remote accessors through `taskstate serve`)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import datetime, timedelta, timezone
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


def test_a_number_is_not_reused_after_pruning_took_every_version(url: str) -> None:
    """A write takes one past the key's newest kept version; once `clean` prunes a deleted
    key's every version (its newest included), its mark keeps the number."""
    clock = Clock()
    store = local(url, clock, history_versions=3, history_retention_days=1)
    state = store.task_state(SCOPE)
    for n in range(5):
        state.set("k", n)  # versions 1-5; the write trims to 3-5
    state.set("other", 1)
    state.delete("k")  # version 6
    clock.tick(3 * 86400)
    # All of k's (the 3 kept, and any the writes have not trimmed yet); other keeps its newest.
    assert store.cleanup(batch_size=1).versions_pruned >= 3
    assert state.history("k") == []
    state.set("k", "again")
    assert [v.version for v in state.history("k")] == [7]
    state.delete("k")
    store.task_state(TaskScope("etl", "run_1", "load", 0)).set("k", 1)  # another key: from 1
    assert state.history("k")[0].version == 8
    assert store.task_state(TaskScope("etl", "run_1", "load", 0)).history("k")[0].version == 1
    # A lower setting: `clean` prunes the versions beyond it.
    for n in range(4):
        state.set("k", n)  # 9-12
    store.cleanup()
    assert [v.version for v in state.history("k")] == [12, 11, 10]
    narrower = local(url, clock, history_versions=2)
    assert narrower.cleanup().versions_pruned >= 1  # k's 10 (11 and 12 stay); the others: none
    assert [v.version for v in state.history("k")] == [12, 11]
    assert narrower.cleanup().versions_pruned == 0


def test_sqlite_as_of_finds_the_version_held_then_among_many_and_times_never_go_back(
    tmp_path: Path,
) -> None:
    """`as_of` on SQLite is a binary search of the key's numbers (times never decrease along
    them): checked against every version's own interval, over gaps the trim and pruning leave;
    a writer whose clock is behind is stamped at the version it follows."""
    clock = Clock()
    store = local(f"sqlite:///{tmp_path}/s.db", clock, history_versions=200)
    state = store.task_state(SCOPE)
    for n in range(300):
        state.set("k", n)
        clock.tick(1 + n % 3)
    clock.now -= 100  # a writer whose clock is behind
    state.set("k", "late")
    newest = state.history("k")
    assert newest[0].value == "late" and newest[0].updated_at == newest[1].updated_at
    state.delete("k")
    clock.tick()
    state.set("k", "back")
    kept = list(reversed(state.history("k")))  # oldest first: 103 .. 303
    assert len(kept) == 200 and kept[0].version == 104
    times = [v.updated_at for v in kept]
    assert times == sorted(times)
    for at in times:  # the newest version stamped at or before (ties: the later number)
        held = [v for v in kept if v.updated_at <= at][-1]
        assert state.get("k", as_of=at) == held.value
    assert state.get("k", as_of=times[-1] + timedelta(seconds=1)) == "back"
    with pytest.raises(HistoryUnavailableError):
        state.get("k", as_of=datetime.fromtimestamp(clock.now - 10**7, timezone.utc))


def _version_rows(url: str) -> tuple[int, int]:
    """How many versions the database holds, and the lowest number (what no read shows)."""
    if url.startswith("sqlite"):
        import sqlite3

        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
            found = conn.execute("SELECT count(*), min(version) FROM taskstate_versions")
            count, oldest = found.fetchone()
    else:
        import psycopg

        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT count(*), min(version) FROM taskstate_versions").fetchone()
            assert row is not None
            count, oldest = row
    return int(count), int(oldest)


def test_writes_trim_in_batches_and_reads_never_see_past_the_window(url: str) -> None:
    """A write trims its key's versions past the number kept every 16th version, in one
    DELETE: the table holds fewer than kept + 16 of a key, and no read sees past the kept
    number."""
    clock = Clock()
    store = local(url, clock, history_versions=3)
    state = store.task_state(SCOPE)
    first = clock.tick()
    for n in range(100):
        state.set("k", n)
        clock.tick()
        count, oldest = _version_rows(url)
        assert count < 3 + 16
        if n == 9:  # versions 1-10 are there; 1-7 are past the window
            assert oldest == 1
            assert [v.version for v in state.history("k", 10)] == [10, 9, 8]
            with pytest.raises(HistoryUnavailableError):
                state.get("k", as_of=first)
            with pytest.raises(VersionNotFoundError):
                state.restore("k", 7)
        if n == 15:  # version 16 trimmed 1-13
            assert oldest == 14
    # Every 16th version a deletion (and a delete between sets): the deletions trim too.
    for n in range(100, 160):  # versions 101-160; 112, 128, 144, 160 deletions
        if n % 16 == 15:
            state.delete("k")
        else:
            state.set("k", n)
        assert _version_rows(url)[0] < 3 + 16
    assert [v.op for v in state.history("k")] == ["delete", "set", "set"]


def test_sqlite_history_written_at_the_previous_schema_migrates_with_its_numbers(
    tmp_path: Path,
) -> None:
    """A store whose versions were written before the migration that stopped writing marks on
    each write (the mark then led, and could be ahead of the newest kept version): after it,
    numbers go on from the mark, `as_of` reads the old versions, and a version stamped before
    the one it follows takes that one's time."""
    import sqlite3

    from taskstate.backends import sqlite as sqlite_backend

    path = tmp_path / "old.db"
    steps = sqlite_backend.MIGRATIONS
    previous = next(
        n for n, step in enumerate(steps) if "taskstate_versions_at" in step and "DROP" in step
    )
    conn = sqlite3.connect(path)
    for step in sqlite_backend.MIGRATIONS[:previous]:
        conn.executescript(step)
    ns = SCOPE.namespace
    rows = [(ns, "k", v, json.dumps(v), None, 1_000_000.0 + v, None, "set") for v in (4, 5)]
    conn.executemany("INSERT INTO taskstate_versions VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    conn.execute("INSERT INTO taskstate_entries VALUES (?, 'k', '5', NULL, 1000005.0, NULL)", (ns,))
    # "gone": deleted, all its versions pruned; "ahead": its mark past its newest version.
    conn.executemany(
        "INSERT INTO taskstate_version_marks VALUES (?, ?, ?)",
        [(ns, "k", 5), (ns, "gone", 9), (ns, "ahead", 7)],
    )
    conn.execute(
        "INSERT INTO taskstate_versions VALUES (?, 'ahead', 6, NULL, NULL, 1000000.0, NULL, "
        "'delete')",
        (ns,),
    )
    # "skew": version 2 written by a clock behind version 1's: the migration stamps it at 1's.
    conn.executemany(
        "INSERT INTO taskstate_versions VALUES (?, 'skew', ?, '1', NULL, ?, NULL, 'set')",
        [(ns, 1, 1_000_010.0), (ns, 2, 1_000_002.0)],
    )
    conn.execute(f"PRAGMA user_version = {previous}")
    conn.commit()
    conn.close()

    clock = Clock()
    clock.now = 1_000_100.0
    store = local(f"sqlite:///{path}", clock)
    state = store.task_state(SCOPE)
    assert state.get("k", as_of=datetime.fromtimestamp(1_000_004.5, timezone.utc)) == 4
    state.set("k", 6)
    state.set("gone", 1)
    state.set("ahead", 1)
    assert [v.version for v in state.history("k")] == [6, 5, 4]
    assert state.history("gone")[0].version == 10
    assert state.history("ahead")[0].version == 8
    assert store.schema_status().current == len(sqlite_backend.MIGRATIONS)
    indexes = sqlite3.connect(path).execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'taskstate_versions'"
    )
    # The age and (key, time) indexes are gone: a version is one row in one b-tree.
    assert indexes.fetchall() == []
    skew = state.history("skew")
    assert [v.updated_at.timestamp() for v in skew] == [1_000_010.0, 1_000_010.0]


def test_expiry_by_cleanup_is_a_version(url: str) -> None:
    clock = Clock()
    store = local(url, clock, default_retention_days=1)
    state = store.task_state(SCOPE)
    state.set("k", 1)
    clock.tick(2 * 86400)
    store.cleanup()
    assert [(v.op, v.value) for v in state.history("k")] == [("expire", None), ("set", 1)]


def test_sqlite_clean_sends_statements_per_batch_not_per_key(tmp_path: Path) -> None:
    """Complexity, not speed: `clean` deletes 300 expired keys and records their 300 `expire`
    versions in one statement (the deletion trigger), then prunes the 300 keys' versions in a
    few statements for the batch; the same few for 3 keys."""

    def cleaned(keys: int) -> tuple[list[str], StateStore]:
        clock = Clock()
        url = f"sqlite:///{tmp_path}/{keys}.db"
        store = local(url, clock, default_retention_days=1, history_retention_days=1)
        state = store.task_state(SCOPE)
        for n in range(keys):
            state.set(f"k{n}", n)
        clock.tick(2 * 86400)
        conn = store.backend._conn()  # type: ignore[attr-defined]
        sent: list[str] = []
        conn.set_trace_callback(sent.append)
        try:
            result = store.cleanup(batch_size=0)
        finally:
            conn.set_trace_callback(None)
        assert (result.deleted, result.versions_pruned) == (keys, keys)
        # A trigger's program is reported as the statement that fired it, again.
        return [s for i, s in enumerate(sent) if i == 0 or s != sent[i - 1]], store

    few, _ = cleaned(3)
    many, store = cleaned(300)
    assert len(many) == len(few) <= 12, many
    state = store.task_state(SCOPE)
    # Each key's `set` version was older than the retention; its `expire` version stays.
    assert [(v.version, v.op) for v in state.history("k299")] == [(2, "expire")]


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
def test_postgres_history_written_at_the_previous_schema_migrates_with_its_numbers(
    fresh_postgres_url: str,
) -> None:
    """The last migration step on a store whose history the previous schema wrote (the age
    index there, marks that led): the index is dropped online, and numbers go on from the
    marks (one ahead of its key's newest kept version, one whose versions are all gone)."""
    import psycopg

    from taskstate.backends import postgres as pg_backend

    clock = Clock()
    store = local(fresh_postgres_url, clock)
    store.migrate()
    state = store.task_state(SCOPE)
    state.set("k", 1)
    state.set("gone", 1)
    step = next(  # found by what it does: its number may change
        number
        for number, sql in enumerate(pg_backend.MIGRATIONS, start=1)
        if sql.startswith("DROP INDEX CONCURRENTLY") and "taskstate_versions_age" in sql
    )
    later = list(range(step, len(pg_backend.MIGRATIONS) + 1))  # steps are idempotent
    with psycopg.connect(fresh_postgres_url, autocommit=True) as conn:
        conn.execute("CREATE INDEX taskstate_versions_age ON taskstate_versions (updated_at)")
        conn.execute("DELETE FROM taskstate_schema_version WHERE version >= %s", (step,))
        conn.execute("UPDATE taskstate_version_marks SET version = 7 WHERE key = 'k'")
        conn.execute("UPDATE taskstate_version_marks SET version = 9 WHERE key = 'gone'")
        conn.execute("DELETE FROM taskstate_versions WHERE key = 'gone'")
    assert store.schema_status().current == step - 1
    assert store.migrate() == later
    with psycopg.connect(fresh_postgres_url) as conn:
        row = conn.execute("SELECT to_regclass('taskstate_versions_age')").fetchone()
        assert row is not None and row[0] is None
    state.set("k", 2)
    state.set("gone", 2)
    assert [v.version for v in state.history("k")] == [8, 1]
    assert [v.version for v in state.history("gone")] == [10]


@pytest.mark.postgres
def test_postgres_as_of_seeks_the_at_index_in_custom_and_generic_plans(
    fresh_postgres_url: str,
) -> None:
    """`get(as_of=)` is one seek of (namespace_md5, key_md5, updated_at, version) however many
    versions and keys there are; the statement is prepared, so its generic plan must seek it
    too (not walk the age index and filter). The key's newest number (the window kept) is one
    backward seek of the primary key, also before the table's statistics exist: a max() there
    was once planned as a walk of every entry of the key on the `_at` index (3 ms at 10,000
    versions)."""
    import psycopg

    from taskstate.backends import postgres

    with StateStore(fresh_postgres_url, settings=Settings()) as store:
        store.migrate()
    namespace = SCOPE.namespace
    sql = postgres._VERSIONS_AT
    for name, number in (("ns", 1), ("key", 2), ("at", 3), ("limit", 4), ("keep", 5)):
        sql = sql.replace(f"%({name})s", f"${number}")
    with psycopg.connect(fresh_postgres_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO taskstate_versions (namespace, key, version, value, updated_at, op) "
            "SELECT %s, 'k' || (g %% 500), g / 500 + 1, '1', 1000000 + g, 'set' "
            "FROM generate_series(0, 49999) g",
            (namespace,),
        )
        conn.execute(f"PREPARE as_of(text, text, float8, int, int) AS {sql}")
        literal = namespace.replace("'", "''")
        for analyze in ("", "ANALYZE taskstate_versions"):
            if analyze:
                conn.execute(analyze)
            for mode in ("force_custom_plan", "force_generic_plan"):
                conn.execute(f"SET plan_cache_mode = {mode}")
                plan = "\n".join(
                    row[0]
                    for row in conn.execute(
                        f"EXPLAIN EXECUTE as_of('{literal}', 'k7', 1025000.5, 1, 20)"
                    )
                )
                assert "Index Scan Backward using taskstate_versions_at" in plan, (mode, plan)
                assert "Backward using taskstate_versions_pkey" in plan, (analyze, mode, plan)
                assert "Sort" not in plan and "Aggregate" not in plan, (analyze, mode, plan)
