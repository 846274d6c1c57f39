"""The Airflow capability table (`taskstate.airflow.versions.RELEASES`): one row per release
line, and the only place that compares Airflow versions. Runs without Airflow; the plugin's
real behaviour per version is tests/airflow/test_ui_plugin_views.py's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from taskstate.airflow.versions import RELEASES, Capabilities, capabilities, version_tuple

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "taskstate"


def test_one_row_per_release_line_oldest_first() -> None:
    releases = [row.release for row in RELEASES]
    assert releases == sorted(set(releases))
    assert releases[0] == (2, 10)


@pytest.mark.parametrize(
    ("version", "release"),
    [("2.10.5", (2, 10)), ("2.11.0", (2, 11)), ("3.0.6", (3, 0)), ("3.2.2", (3, 2)),
     ("3.3.2", (3, 3)), ("3.3.0rc1", (3, 3)), ("9.9", RELEASES[-1].release),
     ("2.9.3", (2, 10))],
)  # fmt: skip
def test_a_version_finds_its_row_or_the_nearest_below(
    version: str, release: tuple[int, int]
) -> None:
    assert capabilities(version).release == release


def test_what_the_rows_say() -> None:
    by_release = {row.release: row for row in RELEASES}
    airflow2, airflow30, airflow32, airflow33 = (
        by_release[r] for r in ((2, 11), (3, 0), (3, 2), (3, 3))
    )
    assert (airflow2.api_plugin, airflow2.ui, airflow2.login_url) == (
        "flask_blueprints", "appbuilder", ""
    )  # fmt: skip
    assert (airflow30.api_plugin, airflow30.ui) == ("fastapi_apps", "url_only")
    assert airflow30.login_url == "../../auth/login"
    # The two destinations the plugin's external views use, offered from 3.1 on; no asset page.
    assert {"task_instance", "nav"} <= airflow32.ui_destinations
    assert "asset" not in airflow32.ui_destinations
    assert [row.provider_mixin for row in (airflow2, airflow30, airflow32, airflow33)] == [
        "none", "taskstate", "taskstate", "airflow"
    ]  # fmt: skip
    assert [r.release for r in RELEASES if r.native_store] == [(3, 3)]
    # Airflow 3.0's API takes its JWT from the header only; 3.1's reads the UI cookie too.
    assert [r.release for r in RELEASES if r.api_cookie] == [(3, 1), (3, 2), (3, 3)]


def test_a_row_is_read_only() -> None:
    with pytest.raises(AttributeError):
        RELEASES[0].native_store = True  # type: ignore[misc]
    assert isinstance(RELEASES[0], Capabilities)


def test_not_a_version() -> None:
    with pytest.raises(ValueError, match="not an Airflow version"):
        version_tuple("main")


def test_no_module_but_the_table_compares_airflow_versions() -> None:
    """A version gate anywhere else would be a second place deciding what a release can do.
    (`taskstate.lint` keeps its own two thresholds: it may import nothing of taskstate's.)"""
    gates = re.compile(r"version_tuple\(|\bversion_info\b.*airflow|_SINCE\b|\(3, [0-9]\)")
    found = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "versions.py" and "lint" not in path.relative_to(PACKAGE).parts
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if gates.search(line)
    ]
    assert found == []
