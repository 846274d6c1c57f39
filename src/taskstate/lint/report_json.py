"""`--format json`: every finding (uncapped) with its reason and before/after, for tools."""

from __future__ import annotations

import json
from typing import Any

from taskstate.lint.airflow_version import AirflowVersion
from taskstate.lint.engine import FileResult
from taskstate.lint.finding import Finding
from taskstate.lint.rules import RULES


def finding_dict(finding: Finding) -> dict[str, Any]:
    """One finding as a JSON-ready dict, with its rule's name and whether it is a heuristic."""
    rule = RULES[finding.code]
    return {
        "code": finding.code,
        "name": rule.name,
        "severity": finding.severity.value,
        "path": finding.path,
        "line": finding.line,
        "col": finding.col,
        "message": finding.message,
        "why": finding.why,
        "before": finding.before,
        "after": finding.after,
        "heuristic": rule.heuristic,
        "fixable": finding.fix is not None,
    }


def render(results: list[FileResult], version: AirflowVersion) -> str:
    """The JSON document: the target Airflow version, files linted, findings and parse errors."""
    findings = [finding_dict(f) for r in results for f in r.findings]
    document = {
        "airflow_version": {"version": version.label, "source": version.source},
        "files": len(results),
        "findings": findings,
        "parse_errors": [r.path for r in results if r.parse_error],
    }
    return json.dumps(document, indent=2)
