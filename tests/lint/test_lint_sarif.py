"""SARIF 2.1.0 output has the structure code-scanning services read."""

from __future__ import annotations

import json
import os
from pathlib import Path

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


# The parts of the SARIF 2.1.0 schema (OASIS sarif-schema-2.1.0.json) that code scanning reads,
# transcribed: required properties, types and the `level` enumeration.
_REGION = {
    "type": "object",
    "properties": {
        "startLine": {"type": "integer", "minimum": 1},
        "startColumn": {"type": "integer", "minimum": 1},
        "endLine": {"type": "integer", "minimum": 1},
        "endColumn": {"type": "integer", "minimum": 1},
    },
}
_ARTIFACT = {
    "type": "object",
    "properties": {"uri": {"type": "string"}, "uriBaseId": {"type": "string"}},
}
_MESSAGE = {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}}
_LEVEL = {"enum": ["none", "note", "warning", "error"]}
SARIF_SUBSET = {
    "type": "object",
    "required": ["version", "runs"],
    "properties": {
        "version": {"const": "2.1.0"},
        "$schema": {"type": "string", "format": "uri"},
        "runs": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["tool"],
                "properties": {
                    "tool": {
                        "type": "object",
                        "required": ["driver"],
                        "properties": {
                            "driver": {
                                "type": "object",
                                "required": ["name"],
                                "properties": {
                                    "name": {"type": "string"},
                                    "version": {"type": "string"},
                                    "rules": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "required": ["id"],
                                            "properties": {
                                                "id": {"type": "string"},
                                                "name": {"type": "string"},
                                                "shortDescription": _MESSAGE,
                                                "fullDescription": _MESSAGE,
                                                "help": _MESSAGE,
                                                "defaultConfiguration": {
                                                    "type": "object",
                                                    "properties": {"level": _LEVEL},
                                                },
                                            },
                                        },
                                    },
                                },
                            }
                        },
                    },
                    "originalUriBaseIds": {
                        "type": "object",
                        "additionalProperties": _ARTIFACT,
                    },
                    "results": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["message"],
                            "properties": {
                                "ruleId": {"type": "string"},
                                "ruleIndex": {"type": "integer", "minimum": -1},
                                "level": _LEVEL,
                                "message": _MESSAGE,
                                "locations": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "properties": {
                                            "physicalLocation": {
                                                "type": "object",
                                                "properties": {
                                                    "artifactLocation": _ARTIFACT,
                                                    "region": _REGION,
                                                },
                                            }
                                        },
                                    },
                                },
                                "fixes": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "required": ["artifactChanges"],
                                        "properties": {
                                            "description": _MESSAGE,
                                            "artifactChanges": {
                                                "type": "array",
                                                "minItems": 1,
                                                "items": {
                                                    "type": "object",
                                                    "required": [
                                                        "artifactLocation",
                                                        "replacements",
                                                    ],
                                                    "properties": {
                                                        "artifactLocation": _ARTIFACT,
                                                        "replacements": {
                                                            "type": "array",
                                                            "minItems": 1,
                                                            "items": {
                                                                "type": "object",
                                                                "required": ["deletedRegion"],
                                                                "properties": {
                                                                    "deletedRegion": _REGION,
                                                                    "insertedContent": {
                                                                        "type": "object",
                                                                        "properties": {
                                                                            "text": {
                                                                                "type": "string"
                                                                            }
                                                                        },
                                                                    },
                                                                },
                                                            },
                                                        },
                                                    },
                                                },
                                            },
                                        },
                                    },
                                },
                                "properties": {"type": "object"},
                            },
                        },
                    },
                },
            },
        },
    },
}


def test_sarif_validates_against_the_schema_subset() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    doc = sarif_for("variables.py", "timestamps.py", "mixin.py", "store_calls.py")
    jsonschema.validate(doc, SARIF_SUBSET)
    broken = json.loads(json.dumps(doc))
    broken["runs"][0]["results"][0]["level"] = "fatal"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, SARIF_SUBSET)
