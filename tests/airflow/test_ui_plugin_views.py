"""Where the state pages appear, per Airflow version, as `airflow plugins` lists the taskstate
plugin: the tab and nav entry on 3.1/3.2, nothing extra on 3.0 (URL only), the FAB view, menu
entry and extra link on 2.x, nothing at all on 3.3+ (Airflow's own store is in charge)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.airflow.harness import airflow_env, checkout_overlay, versions

from taskstate.airflow.ui_extensions import external_views

pytestmark = pytest.mark.airflow


def taskstate_plugin(version: str, tmp: Path) -> dict[str, Any]:
    env_dir = airflow_env(version)
    overlay = checkout_overlay(env_dir, tmp / "overlay")
    base = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env = {**base, "AIRFLOW_HOME": str(tmp / "home"), "PYTHONPATH": str(overlay),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}  # fmt: skip
    out = subprocess.run(
        [str(env_dir / "bin" / "airflow"), "plugins", "--output", "json"],
        env=env, capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    listing = next(line for line in out.stdout.splitlines() if line.startswith("[{"))
    found = [p for p in json.loads(listing) if p["name"] == "taskstate"]
    assert len(found) == 1, out.stdout[-3000:]
    return dict(found[0])


@pytest.mark.parametrize("version", versions() or ["none"])
def test_where_the_pages_appear(version: str, tmp_path: Path) -> None:
    if version == "none":
        pytest.skip("no Airflow version selected")
    plugin = taskstate_plugin(version, tmp_path)
    release = tuple(map(int, version.split(".")))
    if release >= (3, 3):
        assert not plugin.get("external_views") and not plugin.get("fastapi_apps")
    elif release >= (3, 1):
        assert plugin["external_views"] == external_views()
    elif release >= (3, 0):
        assert not plugin.get("external_views") and plugin["fastapi_apps"]
    else:
        assert "Task State" in json.dumps(plugin["appbuilder_views"])
        assert "TaskStateView.assets" in json.dumps(plugin["appbuilder_menu_items"])
        assert "TaskStateLink" in json.dumps(plugin["global_operator_extra_links"])
