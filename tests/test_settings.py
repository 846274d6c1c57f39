from __future__ import annotations

from pathlib import Path

import pytest

from taskstate import StateStore
from taskstate.errors import ConfigError
from taskstate.settings import Settings, default_sqlite_path


def _cfg(tmp_path: Path, text: str) -> dict[str, str]:
    (tmp_path / "airflow.cfg").write_text(text)
    return {"AIRFLOW_HOME": str(tmp_path)}


def test_defaults_match_airflow() -> None:
    s = Settings.load({})
    assert (
        s.default_retention_days,
        s.state_cleanup_batch_size,
        s.clear_on_success,
        s.max_value_storage_bytes,
        s.backend,
        s.worker_backend,
    ) == (30, 0, False, 65535, None, None)


def test_airflow_cfg_is_read_and_env_wins(tmp_path: Path) -> None:
    env = _cfg(
        tmp_path,
        "[state_store]\ndefault_retention_days = 7\nclear_on_success = True\n"
        "max_value_storage_bytes = 0\n[workers]\nstate_store_backend = a.b.C\n",
    )
    s = Settings.load(env)
    assert (
        s.default_retention_days,
        s.clear_on_success,
        s.max_value_storage_bytes,
        s.worker_backend,
    ) == (7, True, 0, "a.b.C")
    env["AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAYS"] = "3"
    env["AIRFLOW__WORKERS__STATE_STORE_BACKEND"] = ""
    s = Settings.load(env)
    assert s.default_retention_days == 3 and s.worker_backend is None


@pytest.mark.parametrize(
    ("option", "raw", "match"),
    [
        ("DEFAULT_RETENTION_DAYS", "-1", r"\[state_store\] default_retention_days must be >= 0"),
        ("STATE_CLEANUP_BATCH_SIZE", "lots", r"\[state_store\] state_cleanup_batch_size must be a"),
        ("CLEAR_ON_SUCCESS", "maybe", r"\[state_store\] clear_on_success"),
        ("MAX_VALUE_STORAGE_BYTES", "-5", r"\[state_store\] max_value_storage_bytes"),
    ],
)
def test_bad_settings_name_the_option(option: str, raw: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Settings.load({f"AIRFLOW__STATE_STORE__{option}": raw})


def test_unknown_backend_path_names_the_option(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\[state_store\] backend = 'no.such.Backend'"):
        StateStore(settings=Settings(backend="no.such.Backend"))
    with pytest.raises(ConfigError, match=r"\[workers\] state_store_backend .* not a subclass"):
        StateStore(
            f"sqlite:///{tmp_path}/s.db", settings=Settings(worker_backend="json.JSONDecoder")
        )


def test_airflow_metastore_backend_name_selects_ours(tmp_path: Path) -> None:
    settings = Settings(
        backend="airflow.state.metastore.MetastoreBackend",
        taskstate_url=f"sqlite:///{tmp_path}/s.db",
    )
    assert StateStore(settings=settings).backend.url.endswith("s.db")


def test_unknown_url_scheme(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no taskstate backend for mysql"):
        StateStore("mysql://x/y", settings=Settings())


def test_default_path() -> None:
    assert default_sqlite_path({"AIRFLOW_HOME": "/srv/af"}) == Path("/srv/af/taskstate.db")
    assert default_sqlite_path({}).name == "state.db"
