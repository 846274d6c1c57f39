"""Airflow's `_CMD` / `_SECRET` option variants, honoured for every option outside a task too
(the CLI on the scheduler machine opens the store the workers use), and a missing driver."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from taskstate import StateStore, TaskScope
from taskstate.errors import ConfigError
from taskstate.settings import Settings, airflow_option, shown_options

# A real secrets backend, importable by path, with Airflow's `get_config` interface.
SECRETS_BACKEND = """
import json, pathlib

class FileSecrets:
    def __init__(self, path):
        self.path = path

    def get_config(self, key):
        return json.loads(pathlib.Path(self.path).read_text()).get(key)
"""


def _cfg(tmp_path: Path, text: str) -> dict[str, str]:
    (tmp_path / "airflow.cfg").write_text(text)
    return {"AIRFLOW_HOME": str(tmp_path)}


def test_env_cmd_variant(tmp_path: Path) -> None:
    env = {"AIRFLOW__STATE_STORE__TASKSTATE_URL_CMD": f"echo sqlite:///{tmp_path}/a.db"}
    assert Settings.load(env).taskstate_url == f"sqlite:///{tmp_path}/a.db"
    env["AIRFLOW__STATE_STORE__TASKSTATE_URL"] = "sqlite:///plain.db"  # the plain variable wins
    assert Settings.load(env).taskstate_url == "sqlite:///plain.db"


def test_file_cmd_variant_of_sql_alchemy_conn(tmp_path: Path) -> None:
    env = _cfg(tmp_path, "[database]\nsql_alchemy_conn_cmd = printf postgresql://u:p@db/af\n")
    assert Settings.load(env).sql_alchemy_conn == "postgresql://u:p@db/af"
    assert airflow_option("database", "sql_alchemy_conn", env) == "postgresql://u:p@db/af"


def test_failing_cmd_is_a_config_error_naming_the_option(tmp_path: Path) -> None:
    env = {"AIRFLOW__STATE_STORE__TASKSTATE_URL_CMD": "false"}
    with pytest.raises(ConfigError, match="AIRFLOW__STATE_STORE__TASKSTATE_URL_CMD"):
        Settings.load(env)
    with pytest.raises(ConfigError, match="cannot run"):
        Settings.load({"AIRFLOW__STATE_STORE__TASKSTATE_URL_CMD": "/nonexistent/cmd"})


def test_secret_variants_read_the_secrets_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file_secrets.py").write_text(SECRETS_BACKEND)
    monkeypatch.syspath_prepend(str(tmp_path))
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"ts_url": f"sqlite:///{tmp_path}/s.db", "conn": "sqlite://"}))
    env = _cfg(
        tmp_path,
        "[secrets]\nbackend = file_secrets.FileSecrets\n"
        f'backend_kwargs = {{"path": "{secrets}"}}\n'
        "[database]\nsql_alchemy_conn_secret = conn\n",
    )
    env["AIRFLOW__STATE_STORE__TASKSTATE_URL_SECRET"] = "ts_url"
    settings = Settings.load(env)
    assert (settings.taskstate_url, settings.sql_alchemy_conn) == (
        f"sqlite:///{tmp_path}/s.db",
        "sqlite://",
    )
    env["AIRFLOW__STATE_STORE__TASKSTATE_URL_SECRET"] = "missing"
    with pytest.raises(ConfigError, match="no such secret"):
        Settings.load(env)


def test_doctor_sources_name_every_variant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`taskstate doctor` shows where each option came from (issue 30.8), for the variants
    the CLI test does not reach: the file's `_cmd` and `_secret`, and an env `_SECRET`."""
    (tmp_path / "file_secrets.py").write_text(SECRETS_BACKEND)
    monkeypatch.syspath_prepend(str(tmp_path))
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"conn": "postgresql://u:pw@db/af", "key": "k" * 40}))
    env = _cfg(
        tmp_path,
        "[secrets]\nbackend = file_secrets.FileSecrets\n"
        f'backend_kwargs = {{"path": "{secrets}"}}\n'
        "[database]\nsql_alchemy_conn_secret = conn\n"
        "[state_store]\nstate_cleanup_batch_size_cmd = echo 500\n",
    )
    env["AIRFLOW__STATE_STORE__TASKSTATE_SECRET_KEY_SECRET"] = "key"
    env["AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAYS"] = "many"
    shown = {o.label: o for o in shown_options(env)}
    cfg = tmp_path / "airflow.cfg"
    assert (
        shown["[database] sql_alchemy_conn"].value,
        shown["[database] sql_alchemy_conn"].source,
    ) == ("postgresql://u:***@db/af", f"sql_alchemy_conn_secret in {cfg}")
    batch = shown["[state_store] state_cleanup_batch_size"]
    assert (batch.value, batch.source) == ("500", f"state_cleanup_batch_size_cmd in {cfg}")
    key = shown["[state_store] taskstate_secret_key"]
    assert (key.value, key.source) == (
        "set",
        "env AIRFLOW__STATE_STORE__TASKSTATE_SECRET_KEY_SECRET",
    )
    retention = shown["[state_store] default_retention_days"]
    assert retention.error is not None and "whole number" in retention.error  # the rest still shown
    assert shown["[state_store] taskstate_token"].value == "not set"


def test_secret_without_a_secrets_backend_says_so() -> None:
    with pytest.raises(ConfigError, match=r"needs \[secrets\] backend"):
        Settings.load({"AIRFLOW__STATE_STORE__TASKSTATE_URL_SECRET": "x"})


def test_the_cli_opens_the_store_a_cmd_option_names(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/shared.db"
    with StateStore(url, settings=Settings()) as store:
        store.task_state(TaskScope("d", "r", "t")).set("cursor", 7)
    env = {"AIRFLOW_HOME": str(tmp_path), "AIRFLOW__STATE_STORE__TASKSTATE_URL_CMD": f"echo {url}"}
    proc = subprocess.run(
        [sys.executable, "-m", "taskstate", "task", "get", "cursor", "--dag-id", "d",
         "--run-id", "r", "--task-id", "t"],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", **env}, check=False,
    )  # fmt: skip
    assert (proc.returncode, proc.stdout.strip()) == (0, "7"), proc.stderr


def test_missing_driver_names_the_extra(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "from taskstate import StateStore\n"
        "from taskstate.settings import Settings\n"
        "StateStore('postgresql://u:p@localhost/db', settings=Settings())\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 1
    assert "ConfigError: postgresql URLs need the psycopg package" in proc.stderr
    assert "pip install 'taskstate[postgres]'" in proc.stderr
