from __future__ import annotations

import os
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from taskstate import StateStore, TaskScope
from taskstate.backends import sqlite as sqlite_backend
from taskstate.backends.base import Entry
from taskstate.backends.sqlite import SQLiteBackend, path_from_url
from taskstate.errors import BackendBusyError, BackendError, ConfigError
from taskstate.settings import Settings
from taskstate.testing.contract import NOW, BackendContract, untimed


class TestSQLiteContract(BackendContract):
    @pytest.fixture
    def backend(self, tmp_path: Path) -> Iterator[SQLiteBackend]:
        backend = SQLiteBackend(f"sqlite:///{tmp_path}/state.db")
        yield backend
        backend.close()


def test_file_is_created_on_first_use_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "state.db"
    backend = SQLiteBackend(f"sqlite:///{path}")
    assert not path.exists()
    backend.set("ns", "k", "1", None, NOW)
    assert path.exists()
    assert untimed(backend.get("ns", "k")) == Entry("1", None)
    mode = backend._conn().execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


@pytest.mark.parametrize(
    ("query", "level"), [("", 1), ("?synchronous=normal", 1), ("?synchronous=full", 2),
                         ("?synchronous=extra", 3)],
)  # fmt: skip
def test_the_urls_synchronous_is_what_every_connection_runs_with(
    tmp_path: Path, query: str, level: int
) -> None:
    """PRAGMA synchronous as SQLite reports it (1 NORMAL, 2 FULL, 3 EXTRA): the bench's
    equal-durability sides rely on `?synchronous=full` really being FULL."""
    store = StateStore(f"sqlite:///{tmp_path}/state.db{query}", settings=Settings())
    backend = store.backend
    assert isinstance(backend, SQLiteBackend)
    levels = [backend._conn().execute("PRAGMA synchronous").fetchone()[0]]
    other = threading.Thread(  # each thread has its own connection
        target=lambda: levels.append(backend._conn().execute("PRAGMA synchronous").fetchone()[0])
    )
    other.start()
    other.join()
    assert levels == [level, level]
    store.close()


@pytest.mark.parametrize(("query", "size"), [("", 0), ("?mmap_size=268435456", 268435456)])
def test_the_urls_mmap_size_is_what_every_connection_reads_with(
    tmp_path: Path, query: str, size: int
) -> None:
    """PRAGMA mmap_size as SQLite reports it on two threads' connections (off by default), and
    a store read through the map sees what a connection without one wrote."""
    store = StateStore(f"sqlite:///{tmp_path}/state.db{query}", settings=Settings())
    backend = store.backend
    assert isinstance(backend, SQLiteBackend)
    sizes = [backend._conn().execute("PRAGMA mmap_size").fetchone()[0]]
    other = threading.Thread(
        target=lambda: sizes.append(backend._conn().execute("PRAGMA mmap_size").fetchone()[0])
    )
    other.start()
    other.join()
    assert sizes == [size, size]
    state = store.task_state(TaskScope("d", "r", "t"))
    state.set("k", 1)
    SQLiteBackend(f"sqlite:///{tmp_path}/state.db").set(state.scope.namespace, "k", "2", None, NOW)
    assert state.get("k") == 2
    store.close()


def test_a_bad_mmap_size_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="mmap_size must be a number of bytes"):
        SQLiteBackend(f"sqlite:///{tmp_path}/state.db?mmap_size=2GB")


def test_a_second_process_view_sees_committed_writes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    SQLiteBackend(url).set("ns", "k", "1", None, NOW)
    assert untimed(SQLiteBackend(url).get("ns", "k")) == Entry("1", None)


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///", "postgresql:///x.db", "state.db"])
def test_bad_urls_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError, match="sqlite:///"):
        path_from_url(url)


def test_relative_and_absolute_urls() -> None:
    assert path_from_url("sqlite:///rel/state.db") == Path("rel/state.db")
    assert path_from_url("sqlite:////abs/state.db") == Path("/abs/state.db")


def test_newer_schema_is_used_but_not_migrated(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    backend = SQLiteBackend(url)
    backend._conn().execute("PRAGMA user_version = 99")
    newer = SQLiteBackend(url)
    newer.set("ns", "k", "1", None, NOW)  # a rolling upgrade keeps old workers writing
    assert untimed(newer.get("ns", "k")) == Entry("1", None)
    with pytest.raises(BackendError, match="upgrade taskstate"):
        newer.migrate()


def test_processes_opening_a_new_file_at_once_all_succeed(tmp_path: Path) -> None:
    """Switching a fresh file to WAL takes an exclusive lock SQLite does not wait for."""
    for trial in range(20):
        backend = SQLiteBackend(f"sqlite:///{tmp_path}/fresh{trial}.db")
        errors: list[BaseException] = []

        def open_and_write(
            backend: SQLiteBackend = backend, errors: list[BaseException] = errors
        ) -> None:
            try:
                backend.set("ns", threading.current_thread().name, "1", None, NOW)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=open_and_write) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert stat.S_IMODE(backend.path.stat().st_mode) == 0o600  # whoever created it
        written = sorted(e.key for e in backend.scan())
        assert written == sorted(t.name for t in threads)


def test_a_version_1_file_is_migrated_keeping_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    conn = sqlite3.connect(path)
    conn.executescript(sqlite_backend.MIGRATIONS[0] + "; PRAGMA user_version = 1;")
    conn.execute(
        f"INSERT INTO {sqlite_backend.TABLE} VALUES (?, ?, ?, ?, ?)", ("ns", "k", "1", None, 5.0)
    )
    conn.commit()
    conn.close()
    backend = SQLiteBackend(f"sqlite:///{path}")
    assert untimed(backend.get("ns", "k")) == Entry("1", None, None)
    assert backend.schema_status().up_to_date


def _hold_write_lock(path: Path) -> sqlite3.Connection:
    """Another process's writer in the middle of an `update()`: the file's write lock taken."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    return holder


def test_a_fresh_reader_does_not_wait_for_a_writer(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    SQLiteBackend(url).set("ns", "k", "1", None, NOW)  # a current schema exists
    holder = _hold_write_lock(tmp_path / "state.db")
    try:
        started = time.monotonic()
        reader = SQLiteBackend(url, busy_timeout_s=5)
        assert untimed(reader.get("ns", "k")) == Entry("1", None)
        assert reader.schema_status().up_to_date
        assert time.monotonic() - started < 1.0
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_busy_timeout_is_a_typed_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    backend = SQLiteBackend(f"sqlite:///{path}", busy_timeout_s=0.2)
    backend.set("ns", "k", "1", None, NOW)
    holder = _hold_write_lock(path)
    try:
        for write in (
            lambda: backend.set("ns", "k", "2", None, NOW),
            lambda: backend.transact("ns", "k", lambda e: (Entry("3", None), None), NOW),
            lambda: backend.delete_expired(NOW, 0),
        ):
            with pytest.raises(BackendBusyError, match=str(path)) as caught:
                write()
            assert isinstance(caught.value, TimeoutError)
        assert untimed(backend.get("ns", "k")) == Entry("1", None)  # reads still go through
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    backend.set("ns", "k", "4", None, NOW)  # and the backend recovers


def test_a_failing_transaction_rolls_back_and_the_connection_stays_usable(tmp_path: Path) -> None:
    backend = SQLiteBackend(f"sqlite:///{tmp_path}/state.db")
    backend.set("ns", "k", "1", None, NOW)

    def write_then_fail(entry: Entry | None) -> tuple[Entry | None, None]:
        backend._conn().execute("DELETE FROM taskstate_entries")  # inside the transaction
        raise KeyError("boom")

    with pytest.raises(KeyError):
        backend.transact("ns", "k", write_then_fail, NOW)
    assert untimed(backend.get("ns", "k")) == Entry("1", None)
    assert not backend._conn().in_transaction


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_files_taskstate_creates_are_private(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        path = tmp_path / "new" / "dir" / "state.db"
        backend = SQLiteBackend(f"sqlite:///{path}")
        backend.set("ns", "k", "1", None, NOW)
        wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
        assert wal.exists() and shm.exists()
        assert [_mode(p) for p in (path.parent.parent, path.parent)] == [0o700, 0o700]
        assert [_mode(p) for p in (path, wal, shm)] == [0o600, 0o600, 0o600]
        backend.close()
    finally:
        os.umask(old)


def test_under_a_setgid_directory_files_are_group_writable(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o2775)
    old = os.umask(0o022)
    try:
        path = shared / "taskstate" / "state.db"
        backend = SQLiteBackend(f"sqlite:///{path}")
        backend.set("ns", "k", "1", None, NOW)
        assert _mode(path.parent) == 0o2770
        assert [_mode(p) for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm"))] == [0o660] * 3
        backend.close()
    finally:
        os.umask(old)


def test_an_existing_file_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    SQLiteBackend(f"sqlite:///{path}").set("ns", "k", "1", None, NOW)
    os.chmod(path, 0o640)
    SQLiteBackend(f"sqlite:///{path}").set("ns", "k", "2", None, NOW)
    assert _mode(path) == 0o640
    assert _mode(tmp_path) == stat.S_IMODE(tmp_path.stat().st_mode)


def test_a_path_under_a_regular_file_is_a_typed_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    backend = SQLiteBackend(f"sqlite:///{tmp_path}/file/state.db")
    with pytest.raises(BackendError, match="cannot create the state database"):
        backend.get("ns", "k")
