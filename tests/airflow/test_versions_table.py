"""The capability table (`taskstate.airflow.versions.RELEASES`) against each real Airflow: every
row says what that release's own code offers (plugin attributes, UI destinations, models,
`airflow.sdk`, the native state store). A new release's row is checked the day its env is
added."""

from __future__ import annotations

import json
import subprocess

import pytest
from tests.airflow.harness import airflow_env, versions

from taskstate.airflow.versions import capabilities

pytestmark = pytest.mark.airflow

PROBE = """
import importlib.util, json, typing
from airflow.plugins_manager import AirflowPlugin
def found(name):
    try:  # a dotted name imports its parents, which may not exist
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False
try:
    from airflow.api_fastapi.core_api.datamodels.plugins import BaseDestinationLiteral
    destinations = sorted(typing.get_args(BaseDestinationLiteral))
except ImportError:
    destinations = []
print(json.dumps({
    "fastapi_apps": hasattr(AirflowPlugin, "fastapi_apps"),
    "external_views": hasattr(AirflowPlugin, "external_views"),
    "destinations": destinations,
    "asset_model": found("airflow.models.asset"),
    "auth_manager_api": found("airflow.api_fastapi.auth"),
    "sdk": found("airflow.sdk"),
    "native_store": found("airflow.state"),
    "version": __import__("airflow").__version__,
}))
"""


@pytest.mark.parametrize("version", versions() or ["none"])
def test_the_row_says_what_the_release_offers(version: str) -> None:
    if version == "none":
        pytest.skip("no Airflow version selected")
    python = airflow_env(version) / "bin" / "python"
    probe = subprocess.run(
        [str(python), "-c", PROBE], capture_output=True, text=True, check=False, timeout=300
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    facts = json.loads(probe.stdout.strip().splitlines()[-1])
    row = capabilities(facts["version"])
    assert row.release == tuple(map(int, version.split(".")))
    assert (row.api_plugin == "fastapi_apps") == facts["fastapi_apps"]
    assert (row.ui == "external_views") == facts["external_views"]
    assert row.ui_destinations == set(facts["destinations"])
    assert (row.asset_model == "asset") == facts["asset_model"]
    assert (row.auth == "auth_manager") == facts["auth_manager_api"]
    assert row.sdk == facts["sdk"]
    assert row.native_store == facts["native_store"]
