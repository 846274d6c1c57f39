"""`taskstate lint`: a static reviewer of DAG files for task/asset state anti-patterns.

It reads source with `ast`; no DAG is imported or executed, and Airflow is never imported.
"""

from taskstate.lint.airflow_version import AirflowVersion
from taskstate.lint.config import LintConfig
from taskstate.lint.engine import FileResult, lint_file, lint_paths, lint_source
from taskstate.lint.finding import Finding
from taskstate.lint.rules import RULES, Rule, Severity

__all__ = [
    "RULES",
    "AirflowVersion",
    "FileResult",
    "Finding",
    "LintConfig",
    "Rule",
    "Severity",
    "lint_file",
    "lint_paths",
    "lint_source",
]
