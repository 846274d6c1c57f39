"""Every option taskstate reads is declared once, in `taskstate.settings` (a `Settings` field,
or a credential of `SECRET_OPTIONS`), and `taskstate doctor` shows each one with its source."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from taskstate.airflow.executors import configured_executors, kubernetes_queue
from taskstate.api.context import max_page_limit
from taskstate.errors import ConfigError
from taskstate.metrics import MetricsSettings
from taskstate.settings import SECRET_OPTIONS, Settings, credential, options, shown_options

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "taskstate"


def test_no_module_but_settings_reads_an_option() -> None:
    """An option read elsewhere (`airflow_option(...)`, an `AIRFLOW__` variable) would be one
    doctor cannot show and a second place naming it."""
    reads = re.compile(r"airflow_option\(|[\"']AIRFLOW__[A-Z_]+__")
    found = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "settings.py" or path.parent != PACKAGE
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if reads.search(line) and not line.lstrip().startswith(("#", '"', "'"))
    ]
    assert found == []


def test_every_option_is_shown_by_doctor_under_its_airflow_cfg_name() -> None:
    shown = {o.label for o in shown_options({})}
    declared = {"[{}] {}".format(*spec.metadata["option"][:2]) for spec in fields(Settings)}
    declared |= {f"[{section}] {option}" for section, option in SECRET_OPTIONS}
    assert shown == declared
    for label in ("[metrics] statsd_port", "[core] executor", "[api] maximum_page_limit",
                  "[local_kubernetes_executor] kubernetes_queue"):  # fmt: skip
        assert label in shown


def test_the_options_features_read_come_from_settings(tmp_path: Path) -> None:
    cfg = tmp_path / "airflow.cfg"
    cfg.write_text(
        "[metrics]\nstatsd_on = True\nmetrics_allow_list = Taskstate.Task, scheduler\n"
        "[core]\nexecutor = LocalExecutor,CeleryExecutor\n"
        "[local_kubernetes_executor]\nkubernetes_queue = k8s\n"
        "[api]\nmaximum_page_limit = 0\n"
    )
    env = {"AIRFLOW_CONFIG": str(cfg), "AIRFLOW__METRICS__TASKSTATE_FLUSH_SECONDS": "2.5"}
    metrics = MetricsSettings.load(env)
    assert (metrics.statsd_on, metrics.flush_seconds) == (True, 2.5)
    assert metrics.allow_list == ("taskstate.task", "scheduler")
    loaded = Settings.load(env)
    assert (loaded.executor, loaded.kubernetes_queue, loaded.max_page_limit) == (
        "LocalExecutor,CeleryExecutor", "k8s", 1
    )  # fmt: skip
    assert options("max_page_limit", "statsd_port", environ=env) == {
        "max_page_limit": 1, "statsd_port": 8125
    }  # fmt: skip
    shown = {o.label: o for o in shown_options(env)}
    assert shown["[metrics] metrics_allow_list"].value == "taskstate.task, scheduler"
    assert shown["[metrics] taskstate_flush_seconds"].source == (
        "env AIRFLOW__METRICS__TASKSTATE_FLUSH_SECONDS"
    )


def test_the_readers_use_the_declared_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW_CONFIG", raising=False)
    monkeypatch.delenv("AIRFLOW_HOME", raising=False)
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
    monkeypatch.setenv("AIRFLOW__LOCAL_KUBERNETES_EXECUTOR__KUBERNETES_QUEUE", "")
    monkeypatch.setenv("AIRFLOW__API__MAXIMUM_PAGE_LIMIT", "not a number")
    assert [e.name for e in configured_executors()] == ["CeleryExecutor"]
    assert kubernetes_queue() == "kubernetes"  # empty: Airflow's default
    assert max_page_limit() == 100  # unreadable: Airflow's default, the API still starts


def test_a_bad_metrics_option_is_a_doctor_failure(tmp_path: Path) -> None:
    env = {"AIRFLOW__METRICS__STATSD_PORT": "eighty", "AIRFLOW_HOME": str(tmp_path)}
    with pytest.raises(ConfigError, match=r"\[metrics\] statsd_port must be a whole number"):
        MetricsSettings.load(env)
    proc = subprocess.run(
        [sys.executable, "-m", "taskstate", "doctor", "--json"],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", **env}, check=False,
    )  # fmt: skip
    checks = {c["check"]: c for c in json.loads(proc.stdout)}
    assert proc.returncode == 1
    assert checks["[metrics] statsd_port"]["status"] == "fail"
    assert "whole number" in checks["[metrics] statsd_port"]["detail"]


def test_a_credential_is_read_only_by_its_declared_name() -> None:
    env = {"AIRFLOW__STATE_STORE__TASKSTATE_TOKEN_CMD": "echo tok"}
    assert credential("taskstate_token", env) == "tok"
    assert credential("taskstate_secret_key", env) is None
    with pytest.raises(ValueError, match="not one of taskstate's credentials"):
        credential("taskstate_url", env)
    # Settings.load never runs a credential's command: one that fails fails only its reader.
    failing = {"AIRFLOW__STATE_STORE__TASKSTATE_SECRET_KEY_CMD": "false"}
    assert Settings.load(failing).taskstate_url is None
    with pytest.raises(ConfigError, match="exited with 1"):
        credential("taskstate_secret_key", failing)
