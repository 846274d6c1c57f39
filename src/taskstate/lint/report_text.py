"""Text output for people: one line per finding, then why and a before/after from their code.

Repeated findings are capped: past `max_per_code` findings of one code in one file, the rest
are listed by line number on one line. The reason for a code is printed in full the first time
it appears.
"""

from __future__ import annotations

import textwrap
from collections import Counter, defaultdict

import click

from taskstate.lint.airflow_version import AirflowVersion
from taskstate.lint.engine import FileResult
from taskstate.lint.finding import Finding
from taskstate.lint.rules import Severity

_COLOURS = {Severity.ERROR: "red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def render(results: list[FileResult], version: AirflowVersion, max_per_code: int) -> str:
    """The findings for people, capped at `max_per_code` per code and file, then a summary."""
    out: list[str] = []
    explained: set[str] = set()
    for result in results:
        by_code: dict[str, list[Finding]] = defaultdict(list)
        for finding in result.findings:
            by_code[finding.code].append(finding)
        hidden: dict[str, list[Finding]] = {}
        for code, group in by_code.items():
            if max_per_code and len(group) > max_per_code:
                hidden[code] = group[max_per_code:]
        for finding in result.findings:
            if finding in hidden.get(finding.code, ()):
                continue
            out.append(_finding(finding, explained))
        for code, rest in hidden.items():
            lines = ", ".join(str(f.line) for f in rest[:20]) + (", ..." if len(rest) > 20 else "")
            out.append(
                click.style(f"{result.path}: ", bold=True)
                + f"... {len(rest)} more {code} in this file (lines {lines})\n"
            )
    out.append(_summary(results, version))
    return "\n".join(out)


def _finding(finding: Finding, explained: set[str]) -> str:
    severity = finding.severity
    head = (
        click.style(f"{finding.location}:", bold=True)
        + " "
        + click.style(finding.code, fg=_COLOURS[severity], bold=True)
        + click.style(f" [{severity.value}]", fg=_COLOURS[severity])
        + f" {finding.message}"
    )
    lines = [head]
    if finding.code in explained:
        lines.append(click.style(f"    why: see {finding.code} above", dim=True))
    else:
        explained.add(finding.code)
        why = textwrap.fill(
            finding.why, width=96, initial_indent="    why: ", subsequent_indent="         "
        )
        lines.append(why)
    if finding.before:
        lines.append(click.style("    before:", fg="red"))
        lines.extend(("      " + line).rstrip() for line in finding.before.splitlines())
    if finding.after:
        suffix = "  (fixable with --fix)" if finding.fix else ""
        lines.append(click.style("    after:" + suffix, fg="green"))
        lines.extend(("      " + line).rstrip() for line in finding.after.splitlines())
    return "\n".join(lines) + "\n"


def _summary(results: list[FileResult], version: AirflowVersion) -> str:
    findings = [f for r in results for f in r.findings]
    files = len(results)
    advice = (
        f"advice for Airflow {version.label} ({version.source})"
        if version.parts
        else "advice for any Airflow version (none installed here: say --airflow-version)"
    )
    if not findings:
        return click.style(f"No findings in {files} file(s); {advice}.", fg="green")
    counts = Counter(f.severity for f in findings)
    parts = [
        f"{counts[s]} {s.value}{'s' if counts[s] != 1 and s is not Severity.INFO else ''}"
        for s in Severity
        if counts[s]
    ]
    touched = sum(1 for r in results if r.findings)
    fixable = sum(1 for f in findings if f.fix is not None)
    text = (
        f"Found {len(findings)} finding(s) ({', '.join(parts)}) in {touched} of {files} "
        f"file(s); {advice}."
    )
    if fixable:
        text += f" {fixable} fixable with --fix (preview with --diff)."
    unparsed = sum(1 for r in results if r.parse_error)
    if unparsed:
        text += f" {unparsed} file(s) could not be parsed."
    by_code = Counter(f.code for f in findings)
    per_code = ", ".join(f"{code} ×{n}" for code, n in sorted(by_code.items()))
    return click.style(text, bold=True) + f"\nBy code: {per_code}"
