from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from taskstate.backends.sqlite import SQLiteBackend, path_from_url
from taskstate.errors import ConfigError
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
    mode = backend._conn().execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_a_second_process_view_sees_committed_writes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    SQLiteBackend(url).set("ns", "k", "1", None, NOW)
    assert SQLiteBackend(url).get("ns", "k") is not None


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///", "postgresql:///x.db", "state.db"])
def test_bad_urls_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError, match="sqlite:///"):
        path_from_url(url)


def test_relative_and_absolute_urls() -> None:
    assert path_from_url("sqlite:///rel/state.db") == Path("rel/state.db")
    assert path_from_url("sqlite:////abs/state.db") == Path("/abs/state.db")


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    backend = SQLiteBackend(url)
    backend._conn().execute("PRAGMA user_version = 99")
    with pytest.raises(Exception, match="upgrade taskstate"):
        SQLiteBackend(url).get("ns", "k")
