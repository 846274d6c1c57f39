"""`import taskstate` pulls in neither Airflow nor OpenTelemetry, checked where both are
installed (each pinned Airflow env has apache-airflow and opentelemetry-sdk), so it can fail;
nor the Airflow-layer packages (`taskstate.airflow`, `taskstate.providers`)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from tests.airflow.harness import REPO, airflow_env, versions

pytestmark = pytest.mark.airflow

PROBE = """
import importlib.util, json, sys
installed = [m for m in ("airflow", "opentelemetry") if importlib.util.find_spec(m)]
import taskstate
loaded = sorted({m.split(".")[0] for m in sys.modules} & {"airflow", "opentelemetry"})
layers = sorted({".".join(m.split(".")[:2]) for m in sys.modules if m.startswith("taskstate.")}
                & {"taskstate.airflow", "taskstate.providers"})
print(json.dumps({"installed": installed, "loaded": loaded, "layers": layers,
                  "file": taskstate.__file__}))
"""


@pytest.mark.parametrize("version", versions() or ["none"])
def test_importing_taskstate_pulls_in_neither_airflow_nor_opentelemetry(version: str) -> None:
    if version == "none":
        pytest.skip("no Airflow version selected")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    python = str(airflow_env(version) / "bin" / "python")
    out = subprocess.run([python, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    report = json.loads(out.stdout)
    assert report["file"].startswith(str(REPO / "src")), report  # this checkout's taskstate
    assert report["installed"] == ["airflow", "opentelemetry"], report  # else it proves nothing
    assert report["loaded"] == [], report
    assert report["layers"] == [], report
