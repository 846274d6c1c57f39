"""When the Airflow plugin serves the API: always below Airflow 3.3; on 3.3+ only when
`[state_store] taskstate_mode = taskstate` keeps taskstate in charge."""

from __future__ import annotations

import pytest

from taskstate.airflow import serving


@pytest.mark.parametrize(
    ("native", "mode", "served"),
    [
        (False, None, True),
        (False, "airflow", True),
        (True, None, False),
        (True, "airflow", False),
        (True, "taskstate", True),
        (True, " TaskState ", True),
        (True, "", False),
    ],
)
def test_api_served(
    monkeypatch: pytest.MonkeyPatch, native: bool, mode: str | None, served: bool
) -> None:
    monkeypatch.setattr(serving, "native_store_active", lambda: native)
    monkeypatch.delenv("AIRFLOW__STATE_STORE__TASKSTATE_MODE", raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", "/nonexistent")
    if mode is not None:
        monkeypatch.setenv("AIRFLOW__STATE_STORE__TASKSTATE_MODE", mode)
    assert serving.api_served() is served
