"""`--format sarif`: SARIF 2.1.0, as code-scanning services accept it.

One run; the driver lists every rule (id, name, descriptions, default level); each result points
at its rule by id and index, with a physical location relative to %SRCROOT% and, when the
finding has one, the fix as a SARIF `fixes` entry.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import taskstate
from taskstate.lint.airflow_version import AirflowVersion
from taskstate.lint.engine import FileResult
from taskstate.lint.finding import Finding
from taskstate.lint.rules import RULES, Severity

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def render(results: list[FileResult], version: AirflowVersion) -> str:
    """The findings as one SARIF 2.1.0 run whose driver lists every rule."""
    codes = list(RULES)
    index = {code: i for i, code in enumerate(codes)}
    rules = [_rule(code) for code in codes]
    sarif_results = [
        _result(finding, index[finding.code], result.text)
        for result in results
        for finding in result.findings
    ]
    document = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "taskstate-lint",
                        "version": taskstate.__version__,
                        "rules": rules,
                    }
                },
                "originalUriBaseIds": {"%SRCROOT%": {"uri": Path.cwd().as_uri() + "/"}},
                "results": sarif_results,
                "properties": {"airflowVersion": version.label},
            }
        ],
    }
    return json.dumps(document, indent=2)


def _rule(code: str) -> dict[str, Any]:
    rule = RULES[code]
    return {
        "id": code,
        "name": rule.name,
        "shortDescription": {"text": rule.message.split(":")[0].replace("{", "").replace("}", "")},
        "fullDescription": {"text": rule.why},
        "help": {"text": rule.why},
        "defaultConfiguration": {"level": _LEVEL[rule.severity]},
        "properties": {
            "precision": "medium" if rule.heuristic else "high",
            "fixable": rule.fixable,
        },
    }


def _uri(path: str) -> str:
    candidate = Path(path)
    try:
        return candidate.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return candidate.resolve().as_uri()


def _result(finding: Finding, rule_index: int, text: str | None) -> dict[str, Any]:
    uri = _uri(finding.path)
    artifact = {"uri": uri} if uri.startswith("file:") else {"uri": uri, "uriBaseId": "%SRCROOT%"}
    location = {
        "physicalLocation": {
            "artifactLocation": artifact,
            "region": {"startLine": finding.line, "startColumn": finding.col},
        }
    }
    message = finding.message
    if finding.after:
        message += f"\n\nWhy: {finding.why}\n\nBefore:\n{finding.before}\n\nAfter:\n{finding.after}"
    result: dict[str, Any] = {
        "ruleId": finding.code,
        "ruleIndex": rule_index,
        "level": _LEVEL[finding.severity],
        "message": {"text": message},
        "locations": [location],
        "properties": {"why": finding.why, "before": finding.before, "after": finding.after},
    }
    if finding.fix is not None and text is not None:
        result["fixes"] = [_fix(finding, text, artifact)]
    return result


def _fix(finding: Finding, text: str, artifact: dict[str, str]) -> dict[str, Any]:
    assert finding.fix is not None
    replacements = []
    for edit in finding.fix.edits:
        line = text.count("\n", 0, edit.start) + 1
        col = edit.start - (text.rfind("\n", 0, edit.start) + 1) + 1
        end_line = text.count("\n", 0, edit.end) + 1
        end_col = edit.end - (text.rfind("\n", 0, edit.end) + 1) + 1
        replacements.append(
            {
                "deletedRegion": {
                    "startLine": line,
                    "startColumn": col,
                    "endLine": end_line,
                    "endColumn": end_col,
                },
                "insertedContent": {"text": edit.text},
            }
        )
    description = finding.fix.title
    if finding.fix.needs_import:
        description += f" (also add `{finding.fix.needs_import}`)"
    return {
        "description": {"text": description},
        "artifactChanges": [
            {
                "artifactLocation": artifact,
                "replacements": replacements,
            }
        ],
    }
