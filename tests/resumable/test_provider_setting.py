"""`[state_store] taskstate_provider_durable` read on its own, and its hook doing nothing where
it cannot work (here: no Airflow installed). The hook's effect on real Airflow is
tests/airflow/test_provider_durable.py's."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from taskstate.airflow import providers
from taskstate.errors import ConfigError
from taskstate.settings import setting

NAME = "AIRFLOW__STATE_STORE__TASKSTATE_PROVIDER_DURABLE"


def test_the_setting_is_off_by_default_and_parsed_like_airflows_booleans(tmp_path) -> None:
    home = {"AIRFLOW_HOME": str(tmp_path)}
    assert setting("provider_durable", home) is False
    assert setting("provider_durable", {**home, NAME: "True"}) is True
    (tmp_path / "airflow.cfg").write_text("[state_store]\ntaskstate_provider_durable = true\n")
    assert setting("provider_durable", home) is True
    with pytest.raises(ConfigError, match="taskstate_provider_durable must be True or False"):
        setting("provider_durable", {**home, NAME: "sometimes"})


def test_without_airflow_the_hook_installs_nothing() -> None:
    """In a fresh interpreter (this one may hold test modules named after Airflow's)."""
    code = (
        "import sys; from taskstate.airflow import providers; "
        "print(providers.unsupported_reason(), providers.install(), 'airflow' in sys.modules)"
    )
    env = {**os.environ, NAME: "True"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == "Airflow is not installed False False", out.stderr


def test_a_bad_value_never_breaks_the_import_it_runs_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NAME, "sometimes")
    assert providers.install() is False
