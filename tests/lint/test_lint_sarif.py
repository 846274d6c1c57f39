"""SARIF 2.1.0 output has the structure code-scanning services read."""

from __future__ import annotations

import json
import os
from pathlib import Path

from click.testing import CliRunner

from taskstate.lint.command import lint
from taskstate.lint.rules import RULES

FIXTURES = Path(__file__).parent / "fixtures"


def sarif_for(*paths: str) -> dict:
    old = Path.cwd()
    os.chdir(FIXTURES)
    try:
        result = CliRunner().invoke(lint, ["--format", "sarif", *paths], catch_exceptions=False)
    finally:
        os.chdir(old)
    assert result.exit_code == 1
    return json.loads(result.output)


def test_sarif_structure() -> None:
    doc = sarif_for("variables.py", "timestamps.py", "mixin.py")
    assert doc["version"] == "2.1.0"
    assert doc["$schema"].endswith("sarif-2.1.0.json")
    (run,) = doc["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "taskstate-lint"
    rules = driver["rules"]
    assert [r["id"] for r in rules] == list(RULES)
    for rule in rules:
        assert rule["shortDescription"]["text"] and rule["fullDescription"]["text"]
        assert rule["defaultConfiguration"]["level"] in {"error", "warning", "note"}
    assert run["results"]
    for result in run["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        assert result["level"] in {"error", "warning", "note"}
        assert result["message"]["text"]
        (location,) = result["locations"]
        physical = location["physicalLocation"]
        assert physical["artifactLocation"]["uri"] in {"variables.py", "timestamps.py", "mixin.py"}
        assert physical["artifactLocation"]["uriBaseId"] == "%SRCROOT%"
        assert physical["region"]["startLine"] >= 1 and physical["region"]["startColumn"] >= 1
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"].endswith("/")


def test_sarif_levels_follow_severity_and_fixes_are_described() -> None:
    doc = sarif_for("variables.py", "timestamps.py")
    results = doc["runs"][0]["results"]
    levels = {r["ruleId"]: r["level"] for r in results}
    assert levels["TS101"] == "error" and levels["TS104"] == "warning"
    fixed = [r for r in results if r["ruleId"] == "TS601"]
    assert len(fixed) == 2
    (change,) = fixed[0]["fixes"][0]["artifactChanges"]
    (replacement,) = change["replacements"]
    assert replacement["deletedRegion"]["startLine"] == 11
    # the fixture imports `datetime as dt`, so the fix reuses it instead of adding an import
    assert replacement["insertedContent"]["text"] == "datetime.now(tz=dt.timezone.utc)"
