from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from taskstate.backends import sqlite as sqlite_backend
from taskstate.backends.base import Entry
from taskstate.backends.sqlite import SQLiteBackend, path_from_url
from taskstate.errors import BackendError, ConfigError
from taskstate.testing.contract import NOW, BackendContract


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
    assert backend.get("ns", "k") == Entry("1", None)
    mode = backend._conn().execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_a_second_process_view_sees_committed_writes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    SQLiteBackend(url).set("ns", "k", "1", None, NOW)
    assert SQLiteBackend(url).get("ns", "k") == Entry("1", None)


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
    assert newer.get("ns", "k") == Entry("1", None)
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
    assert backend.get("ns", "k") == Entry("1", None, None)
    assert backend.schema_status().up_to_date
