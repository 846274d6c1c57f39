"""When the Airflow plugin serves the API: always below Airflow 3.3; on 3.3+ only when
`[state_store] taskstate_mode = taskstate` keeps taskstate in charge."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from taskstate.airflow import hosting, versions


@pytest.fixture(autouse=True)
def _fresh_mode() -> Iterator[None]:
    versions.taskstate_mode.cache_clear()
    yield
    versions.taskstate_mode.cache_clear()


@pytest.mark.parametrize(
    ("native_available", "mode", "served"),
    [
        (False, None, True),
        (False, "native", True),
        (True, None, False),
        (True, "native", False),
        (True, "taskstate", True),
    ],
)
def test_api_served(
    monkeypatch: pytest.MonkeyPatch, native_available: bool, mode: str | None, served: bool
) -> None:
    monkeypatch.setattr(versions, "native_store_available", lambda: native_available)
    monkeypatch.delenv("AIRFLOW__STATE_STORE__TASKSTATE_MODE", raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", "/nonexistent")
    if mode is not None:
        monkeypatch.setenv("AIRFLOW__STATE_STORE__TASKSTATE_MODE", mode)
    assert hosting.api_served() is served
