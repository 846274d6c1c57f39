"""The contract every `StateBackend` passes — shipped in the package so third-party backends can
run it too. Subclass `BackendContract` in a test module and provide a `backend` fixture that
yields a fresh, migrated, empty backend:

    class TestMyBackend(BackendContract):
        @pytest.fixture
        def backend(self, tmp_path):
            yield MyBackend(...)
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from taskstate.backends.base import Entry, Row, StateBackend
from taskstate.errors import BackendError
from taskstate.scope import AssetScope, TaskScope, task_prefix

NS = TaskScope("dag", "run", "task").namespace
NS_1 = TaskScope("dag", "run", "task", 1).namespace
NS_10 = TaskScope("dag", "run", "task", 10).namespace
OTHER_RUN = TaskScope("dag", "run2", "task").namespace
ASSET = AssetScope(name="orders").namespace
NOW = 1_000_000.0


def untimed(entry: Entry | None) -> Entry | None:
    """`entry` without `updated_at`, to compare with an Entry built by hand."""
    return None if entry is None else entry._replace(updated_at=None)


class BackendContract:
    """Behaviour the store relies on, stated once for every backend."""

    def test_get_absent_is_none(self, backend: StateBackend) -> None:
        assert backend.get(NS, "missing") is None

    def test_set_then_get_round_trips_text_and_expiry(self, backend: StateBackend) -> None:
        backend.set(NS, "k", '{"a":[1,2]}', NOW + 5.5, NOW)
        assert untimed(backend.get(NS, "k")) == Entry('{"a":[1,2]}', NOW + 5.5)
        backend.set(NS, "never", "1", None, NOW)
        assert untimed(backend.get(NS, "never")) == Entry("1", None)

    def test_the_writer_is_stored_with_each_write(self, backend: StateBackend) -> None:
        writer = '{"kind":"api","subject":"ops"}'
        backend.set(NS, "k", "1", None, NOW, writer)
        assert untimed(backend.get(NS, "k")) == Entry("1", None, writer)
        assert [r.updated_by for r in backend.scan(NS)] == [writer]
        backend.set(NS, "k", "2", None, NOW)  # an unknown writer replaces a known one
        assert untimed(backend.get(NS, "k")) == Entry("2", None, None)
        task = '{"kind":"task"}'
        assert untimed(
            backend.transact(NS, "k", lambda e: (Entry("3", None, task), e), NOW)
        ) == Entry("2", None, None)
        assert untimed(backend.get(NS, "k")) == Entry("3", None, task)

    def test_set_overwrites(self, backend: StateBackend) -> None:
        backend.set(NS, "k", "1", NOW + 1, NOW)
        backend.set(NS, "k", "2", None, NOW + 1)
        assert untimed(backend.get(NS, "k")) == Entry("2", None)
        assert [r.updated_at for r in backend.scan(NS)] == [NOW + 1]
        # `get` brings updated_at along (so `entry(key)` is one read), as `transact` does.
        entry = backend.get(NS, "k")
        assert entry is not None and entry.updated_at == NOW + 1
        assert backend.transact(NS, "k", lambda e: (None, e), NOW + 2) == entry

    def test_namespaces_are_isolated(self, backend: StateBackend) -> None:
        for i, ns in enumerate((NS, NS_1, NS_10, OTHER_RUN, ASSET)):
            backend.set(ns, "k", str(i), None, NOW)
        assert [untimed(backend.get(ns, "k")) for ns in (NS, NS_1, NS_10, OTHER_RUN, ASSET)] == [
            Entry(str(i), None) for i in range(5)
        ]

    def test_delete_is_a_noop_when_absent(self, backend: StateBackend) -> None:
        backend.delete(NS, "missing")
        backend.set(NS, "k", "1", None, NOW)
        backend.delete(NS, "k")
        assert backend.get(NS, "k") is None

    def test_delete_if_removes_only_the_version_read(self, backend: StateBackend) -> None:
        writer = '{"kind":"api","subject":"a"}'
        backend.set(NS, "k", "1", NOW + 9, NOW, writer)
        first = backend.get(NS, "k")
        assert first is not None
        backend.set(NS, "k", "1", NOW + 9, NOW + 1, writer)  # same value, a later write
        assert not backend.delete_if(NS, "k", first)
        second = backend.get(NS, "k")
        assert second is not None and backend.delete_if(NS, "k", second)
        assert backend.get(NS, "k") is None
        assert not backend.delete_if(NS, "k", second)  # gone: nothing to delete

    @pytest.mark.parametrize("key", [".", "..", "a/b", "%2F", "/", "ключ", "a b", "*", "%", "_"])
    def test_keys_are_data_not_paths_or_patterns(self, backend: StateBackend, key: str) -> None:
        backend.set(NS, "other", "0", None, NOW)
        backend.set(NS, key, '"v"', None, NOW)
        assert untimed(backend.get(NS, key)) == Entry('"v"', None)
        backend.delete(NS, key)
        assert backend.get(NS, key) is None
        assert untimed(backend.get(NS, "other")) == Entry("0", None)

    def test_clear_removes_one_namespace_only(self, backend: StateBackend) -> None:
        for ns in (NS, NS_1, NS_10, OTHER_RUN, ASSET):
            backend.set(ns, "a", "1", None, NOW)
            backend.set(ns, "b", "2", None, NOW)
        assert backend.clear(NS_1) == 2
        assert backend.get(NS_1, "a") is None
        assert all(backend.get(ns, "a") for ns in (NS, NS_10, OTHER_RUN, ASSET))

    def test_clear_prefix_spans_map_indices_of_one_task(self, backend: StateBackend) -> None:
        for ns in (NS, NS_1, NS_10, OTHER_RUN, ASSET):
            backend.set(ns, "a", "1", None, NOW)
        backend.set(TaskScope("dag", "run", "task2").namespace, "a", "1", None, NOW)
        assert backend.clear_prefix(task_prefix("dag", "run", "task")) == 3
        assert [r.namespace for r in backend.scan()] == sorted(
            [OTHER_RUN, ASSET, TaskScope("dag", "run", "task2").namespace]
        )

    def test_rows_and_counts_of_one_namespace(self, backend: StateBackend) -> None:
        for key in ("b", "a", "ab", "c"):
            backend.set(NS, key, "1", None, NOW)
        backend.set(NS, "old", "1", NOW - 1, NOW)  # expired: never listed or counted
        for ns in (NS_1, NS_10):  # a namespace prefix of NS_1's is not NS_1
            backend.set(ns, "a", "1", None, NOW)
        later = NOW
        assert [r.key for r in backend.rows(NS, later)] == ["a", "ab", "b", "c"]
        assert [r.key for r in backend.rows(NS, later, limit=2, offset=1)] == ["ab", "b"]
        assert [r.key for r in backend.rows(NS, later, key_prefix="a")] == ["a", "ab"]
        assert [r.key for r in backend.rows(NS_1, later)] == ["a"]
        assert backend.rows(NS, later, offset=9) == []
        row = backend.rows(NS, later, key_prefix="c")[0]
        assert (row.namespace, row.value, row.expires_at) == (NS, "1", None)
        assert backend.count(NS, later, exact=True) == 4
        assert backend.count(NS, later, exact=True, key_prefix="a") == 2
        assert backend.count(NS_1, later, exact=True) == 1
        assert backend.count(task_prefix("dag"), later) == 6
        assert backend.count(task_prefix("dag"), later, cap=3) == 3
        assert backend.counts([NS_1, NS, task_prefix("x")], later, exact=True) == [1, 4, 0]
        assert backend.counts([task_prefix("dag"), NS_1], later, cap=5) == [5, 2]

    def test_groups_are_the_distinct_fields_of_live_namespaces(self, backend: StateBackend) -> None:
        for dag, run, task, index in [
            ("etl_a", "r1", "x", -1),
            ("etl_a", "r1", "y", 10),
            ("etl_a", "r1", "y", 2),
            ("etl_a", "r 2", "x", -1),  # " " sorts right after the field separator
            ("etlxa", "r1", "x", -1),
            ("report", "r1", "x", -1),
        ]:
            backend.set(TaskScope(dag, run, task, index).namespace, "k", "1", None, NOW)
        backend.set(TaskScope("gone", "r", "t").namespace, "k", "1", NOW - 1, NOW)  # expired
        backend.set(ASSET, "k", "1", None, NOW)
        tasks, later = task_prefix("etl_a")[:2], NOW
        assert backend.groups(tasks, later) == ["etl_a", "etlxa", "report"]
        assert backend.groups(tasks, later, start="etl_", like="etl\\_%") == ["etl_a"]
        assert backend.groups(tasks, later, like="%a") == ["etl_a", "etlxa"]
        assert backend.groups(task_prefix("etl_a"), later) == ["r 2", "r1"]
        run = task_prefix("etl_a", "r1")
        assert backend.groups(run, later, whole=True) == ["x\x1f-1", "y\x1f10", "y\x1f2"]
        assert backend.groups(run, later, whole=True, start="y\x1f") == ["y\x1f10", "y\x1f2"]
        assert backend.groups(ASSET[:2], later, whole=True) == ["orders"]
        assert backend.groups(task_prefix("none"), later) == []
        # `limit`: the first ones only (discovery asks for what its page shows), after `like`.
        assert backend.groups(tasks, later, limit=2) == ["etl_a", "etlxa"]
        assert backend.groups(tasks, later, like="%t", limit=1) == ["report"]
        assert backend.groups(run, later, whole=True, limit=0) == []

    def test_scan_orders_by_namespace_then_key(self, backend: StateBackend) -> None:
        rows = [(NS_1, "b"), (NS, "z"), (NS, "a"), (ASSET, "w"), (NS_10, "a")]
        for ns, key in rows:
            backend.set(ns, key, "1", None, NOW)
        assert [(r.namespace, r.key) for r in backend.scan()] == sorted(rows)
        prefix = task_prefix("dag", "run", "task")
        assert [(r.namespace, r.key) for r in backend.scan(prefix)] == sorted(rows[:3] + rows[4:])
        assert [(r.namespace, r.key) for r in backend.scan(NS)] == [(NS, "a"), (NS, "z")]

    def test_transact_creates_updates_and_returns_result(self, backend: StateBackend) -> None:
        def incr(entry: Entry | None) -> tuple[Entry | None, int]:
            value = 1 if entry is None else int(entry.value) + 1
            return Entry(str(value), None), value

        assert backend.transact(NS, "n", incr, NOW) == 1
        assert backend.transact(NS, "n", incr, NOW) == 2
        assert untimed(backend.get(NS, "n")) == Entry("2", None)

    def test_transact_writing_nothing_leaves_the_row(self, backend: StateBackend) -> None:
        backend.set(NS, "k", "1", NOW + 9, NOW)
        assert untimed(backend.transact(NS, "k", lambda e: (None, e), NOW)) == Entry("1", NOW + 9)
        assert untimed(backend.get(NS, "k")) == Entry("1", NOW + 9)
        assert backend.transact(NS, "absent", lambda e: (None, "r"), NOW) == "r"
        assert backend.get(NS, "absent") is None

    def test_transact_failing_callback_writes_nothing(self, backend: StateBackend) -> None:
        backend.set(NS, "k", "1", None, NOW)

        def boom(entry: Entry | None) -> tuple[Entry | None, None]:
            raise RuntimeError("boom")

        with pytest.raises(RuntimeError, match="boom"):
            backend.transact(NS, "k", boom, NOW)
        assert untimed(backend.get(NS, "k")) == Entry("1", None)
        backend.set(NS, "k", "2", None, NOW)  # the backend is usable afterwards
        assert untimed(backend.get(NS, "k")) == Entry("2", None)

    def test_set_many_writes_every_row_or_none(self, backend: StateBackend) -> None:
        """`taskstate import`'s promise: one transaction. A backend without `set_many` refuses
        (BackendError) and writes nothing, so import refuses to run on it."""
        backend.set(NS, "kept", "0", None, NOW)
        good = [Row(NS, "a", "1", None, NOW), Row(ASSET, "b", "2", NOW + 5, NOW, '{"kind":"api"}')]
        try:
            written = backend.set_many(good)
        except BackendError as exc:
            assert "no set_many" in str(exc), exc
            assert [(r.namespace, r.key) for r in backend.scan()] == [(NS, "kept")]
            return
        assert written == 2
        assert untimed(backend.get(NS, "a")) == Entry("1", None)
        assert untimed(backend.get(ASSET, "b")) == Entry("2", NOW + 5, '{"kind":"api"}')
        # replace=False keeps what exists and adds the rest.
        assert backend.set_many([Row(NS, "kept", "9", None, NOW), Row(NS, "c", "3", None, NOW)],
                                replace=False) == 1  # fmt: skip
        assert (untimed(backend.get(NS, "kept")), untimed(backend.get(NS, "c"))) == (
            Entry("0", None),
            Entry("3", None),
        )
        # The database refuses the last row (a NULL value): the rows before it are rolled back.
        before = list(backend.scan())
        broken = [Row(NS, "d", "4", None, NOW), Row(NS, "a", "11", None, NOW),
                  Row(OTHER_RUN, "e", None, None, NOW)]  # type: ignore[arg-type]  # fmt: skip
        with pytest.raises(BackendError):
            backend.set_many(broken)
        assert list(backend.scan()) == before
        backend.set(NS, "d", "4", None, NOW)  # the backend is usable afterwards
        assert untimed(backend.get(NS, "d")) == Entry("4", None)

    def test_transact_from_threads_loses_no_update(self, backend: StateBackend) -> None:
        def incr(entry: Entry | None) -> tuple[Entry | None, None]:
            return Entry(str(0 if entry is None else int(entry.value) + 1), None), None

        def work() -> None:
            for _ in range(50):
                backend.transact(NS, "n", incr, NOW)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert untimed(backend.get(NS, "n")) == Entry("199", None)

    def test_expired_rows_are_counted_and_deleted_in_batches(self, backend: StateBackend) -> None:
        for i in range(7):
            backend.set(NS, f"old{i}", "1", NOW - 1 - i, NOW - 100)
        backend.set(NS, "fresh", "1", NOW + 100, NOW)
        backend.set(NS, "never", "1", None, NOW)
        backend.set(ASSET, "asset", "1", None, NOW)
        assert backend.count_expired(NOW) == 7
        assert backend.delete_expired(NOW, 3) == 3
        assert backend.delete_expired(NOW, 3) == 3
        assert backend.delete_expired(NOW, 3) == 1
        assert backend.delete_expired(NOW, 3) == 0
        assert sorted(r.key for r in backend.scan()) == ["asset", "fresh", "never"]

    def test_delete_expired_unbatched_is_one_bounded_statement(self, backend: StateBackend) -> None:
        for i in range(2000):  # more than SQLite's historic 999-variable limit
            backend.set(NS, f"k{i}", "1", NOW - 1, NOW - 10)
        assert backend.delete_expired(NOW, 0) == 2000
        assert backend.count_expired(NOW) == 0

    def test_large_and_unicode_values_round_trip(self, backend: StateBackend) -> None:
        big = '"' + "é" * 500_000 + '"'
        backend.set(NS, "big", big, None, NOW)
        assert untimed(backend.get(NS, "big")) == Entry(big, None)

    def test_schema_is_current_and_migrate_is_idempotent(self, backend: StateBackend) -> None:
        assert backend.schema_status().up_to_date
        assert backend.migrate() == []

    def test_close_then_reuse_reconnects(self, backend: StateBackend) -> None:
        backend.set(NS, "k", "1", None, NOW)
        backend.close()
        assert untimed(backend.get(NS, "k")) == Entry("1", None)

    def test_async_twins(self, backend: StateBackend) -> None:
        async def go() -> tuple[Entry | None, Entry | None, int]:
            await backend.aset(NS, "k", "1", None, NOW)
            got = await backend.aget(NS, "k")
            await backend.adelete(NS, "k")
            gone = await backend.aget(NS, "k")
            await backend.aset(NS, "k2", "1", None, NOW)
            return got, gone, await backend.aclear(NS)

        got, gone, cleared = asyncio.run(go())
        assert (untimed(got), gone, cleared) == (Entry("1", None), None, 1)
