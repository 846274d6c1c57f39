"""scripts/junit_check.py, the gate of every test stage, on the JUnit reports of real pytest runs:
two "lanes" of a tiny suite whose tests skip the way tests/airflow's do."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]

SUITE = """
import os
import pytest

SELECTED = os.environ["LANE_VERSIONS"].split()


@pytest.mark.parametrize("version", ["2.10", "3.2"])
def test_per_version(version):
    if os.environ.get("MISNAMED") and version == "3.2":  # the skip names the wrong version
        pytest.skip("Airflow 2.10 not selected")
    if version not in SELECTED:
        pytest.skip(f"Airflow {version} not selected")


@pytest.mark.skipif("3.2" not in SELECTED, reason="Airflow 3.2 not selected")
def test_on_32_only():
    pass


def test_deployment():
    # The bug junit_check exists for: a skip whose words do not match what the lane selected.
    if os.environ.get("WRONG_SKIP"):
        pytest.skip("Airflow 3.2 not selected")
    if os.environ.get("NO_VERSION_SKIP"):
        pytest.skip("a server did not start")
"""


@pytest.fixture(scope="module")
def junit_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("junit_check", REPO / "scripts/junit_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def lane(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., tuple[Path, Path]]:
    """`lane(versions, **env)` runs the suite as one lane: (collected, junit) as
    scripts/test-airflow.sh writes them. A lane this module ran already is not run again (two
    nested pytest runs each); a test that edits a report edits a copy."""
    ran: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[Path, Path]] = {}

    def run(versions: str, **env: str) -> tuple[Path, Path]:
        key = (versions, tuple(sorted(env.items())))
        if key not in ran:
            ran[key] = _run_lane(tmp_path_factory.mktemp("lane"), versions, **env)
        return ran[key]

    return run


def _run_lane(root: Path, versions: str, **env: str) -> tuple[Path, Path]:
    suite = root / "suite"
    suite.mkdir(exist_ok=True)
    (suite / "test_lane.py").write_text(SUITE)
    # No plugins (hypothesis, timeout...): the two runs take a fraction of a second each.
    environ = {
        **os.environ,
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "LANE_VERSIONS": versions,
        **env,
    }
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_lane.py"]
    collected, junit = root / "lane.collected", root / "lane.xml"
    out = subprocess.run([*args, "--collect-only"], cwd=suite, env=environ, capture_output=True)
    collected.write_bytes(out.stdout)
    subprocess.run([*args, f"--junitxml={junit}"], cwd=suite, env=environ, capture_output=True)
    return collected, junit


def test_lanes_that_each_run_their_versions_pass_alone_and_together(
    junit_check: ModuleType, lane: Callable[..., tuple[Path, Path]]
) -> None:
    a = lane("2.10")
    b = lane("3.2")
    assert junit_check.main(["lane a", *map(str, a), "--versions", "2.10"]) == 0
    assert junit_check.main(["lane b", *map(str, b), "--versions", "3.2"]) == 0
    assert junit_check.main(["--union", "both", *map(str, a + b)]) == 0


def test_a_skip_naming_a_version_the_lane_selected_fails(
    junit_check: ModuleType,
    lane: Callable[..., tuple[Path, Path]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    wrong = lane("2.10 3.2", WRONG_SKIP="1")
    assert junit_check.main(["lane", *map(str, wrong), "--versions", "2.10 3.2"]) == 1
    assert "test_deployment: skipped (Airflow 3.2 not selected)" in capsys.readouterr().err
    # The same words in a lane that left 3.2 out are a test meant for another lane.
    right = lane("2.10", WRONG_SKIP="1")
    assert junit_check.main(["lane", *map(str, right), "--versions", "2.10"]) == 0
    # A skip whose words name another version, in the lane of the test's own version.
    misnamed = lane("3.2", MISNAMED="1")
    capsys.readouterr()
    assert junit_check.main(["lane", *map(str, misnamed), "--versions", "3.2"]) == 1
    assert "Airflow 3.2: 0 tests passed, 1 were collected" in capsys.readouterr().err


def test_a_skip_naming_no_version_fails(
    junit_check: ModuleType,
    lane: Callable[..., tuple[Path, Path]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    files = lane("2.10 3.2", NO_VERSION_SKIP="1")
    assert junit_check.main(["lane", *map(str, files), "--versions", "2.10 3.2"]) == 1
    assert "a server did not start" in capsys.readouterr().err
    # A stage without versions (scripts/test.sh's pytest stage) allows no skip at all.
    files = lane("2.10")
    assert junit_check.main(["stage", *map(str, files)]) == 1


def test_a_test_function_that_passed_in_no_lane_fails_the_union(
    junit_check: ModuleType,
    lane: Callable[..., tuple[Path, Path]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Each lane alone is green (its skip names a version it left out), yet test_deployment
    # ran nowhere: the union check is what catches it.
    a = lane("2.10", WRONG_SKIP="1")
    b = lane("2.11", WRONG_SKIP="1")
    assert junit_check.main(["lane a", *map(str, a), "--versions", "2.10"]) == 0
    assert junit_check.main(["lane b", *map(str, b), "--versions", "2.11"]) == 0
    capsys.readouterr()
    assert junit_check.main(["--union", "both", *map(str, a + b)]) == 1
    err = capsys.readouterr().err
    assert "test_lane.test_deployment: passed in no lane" in err
    assert "test_lane.test_on_32_only: passed in no lane" in err
    assert "test_per_version" not in err  # its [2.10] passed in lane a


def test_a_lane_that_ran_fewer_tests_than_it_collected_fails(
    junit_check: ModuleType,
    lane: Callable[..., tuple[Path, Path]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    collected, ran = lane("2.10 3.2")
    junit = tmp_path / "lane.xml"
    tree = ET.parse(ran)  # the lane crashed after its first test: one case short
    suite = next(tree.getroot().iter("testsuite"))
    suite.remove(next(suite.iter("testcase")))
    tree.write(junit)
    assert junit_check.main(["lane", str(collected), str(junit), "--versions", "2.10 3.2"]) == 1
    assert "ran 3 test cases, 4 were collected" in capsys.readouterr().err
