"""`taskstate lint [PATH ...]`: the click command (registered lazily by taskstate.cli).

Exit status: 0 no error/warning findings (info is advice), 1 error or warning findings,
2 usage error or a file that does not parse.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from taskstate.errors import ConfigError
from taskstate.lint import config as lint_config
from taskstate.lint import fixes, report_json, report_rules, report_sarif, report_text
from taskstate.lint.airflow_version import AirflowVersion
from taskstate.lint.engine import FileResult, lint_paths, lint_source
from taskstate.lint.rules import Severity

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def _codes(values: tuple[str, ...]) -> tuple[str, ...]:
    """`--select TS1,TS2 --select TS6` -> ("TS1", "TS2", "TS6")."""
    return tuple(
        code.strip().upper() for value in values for code in value.split(",") if code.strip()
    )


@click.command(name="lint")
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["text", "json", "sarif", "markdown"]),
    default="text",
    show_default=True,
    help="Report format; sarif is SARIF 2.1.0 for code-scanning upload; markdown is for --rules.",
)
@click.option("--select", multiple=True, help="Only these codes or prefixes (e.g. TS1,TS501).")
@click.option("--ignore", multiple=True, help="Skip these codes or prefixes.")
@click.option(
    "--airflow-version",
    metavar="X.Y",
    help="Airflow the advice is for (default: config, else the installed apache-airflow).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="pyproject.toml to read [tool.taskstate.lint] from (default: the nearest one).",
)
@click.option("--fix", is_flag=True, help="Apply the safe mechanical fixes (e.g. TS601) in place.")
@click.option(
    "--diff",
    is_flag=True,
    help="Print the fixes as a unified diff on stdout (the report goes to stderr); change no file.",
)
@click.option(
    "--max-per-code",
    type=click.IntRange(min=0),
    help="Text output: show at most N findings of one code per file (0 = all; default 10).",
)
@click.option(
    "--output-file",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the report here instead of standard output.",
)
@click.option(
    "--rules",
    "list_rules",
    is_flag=True,
    help="List every rule (code, severity, name, why) and exit; with --format markdown, "
    "README's rule table.",
)
@click.option(
    "--color/--no-color",
    default=None,
    help="Colour text output (default: on a terminal, unless NO_COLOR is set).",
)
def lint(
    paths: tuple[Path, ...],
    output_format: str,
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    airflow_version: str | None,
    config_path: Path | None,
    fix: bool,
    diff: bool,
    max_per_code: int | None,
    output_file: Path | None,
    color: bool | None,
    list_rules: bool,
) -> None:
    """Find task/asset state anti-patterns in DAG files (static: nothing is imported or run).

    PATH is a file or a directory (default: the current directory). Exit status: 0 no error or
    warning findings, 1 error or warning findings, 2 usage error or a file that does not parse.
    Config: [tool.taskstate.lint] in pyproject.toml; silence one line with `# noqa: TS101`.
    """
    if list_rules:
        if output_format not in ("text", "markdown"):
            raise click.UsageError("--rules prints text or markdown")
        click.echo(report_rules.markdown() if output_format == "markdown" else report_rules.text())
        return
    if output_format == "markdown":
        raise click.UsageError("--format markdown is for --rules; reports are text, json or sarif")
    targets = paths or (Path("."),)
    if color is None and os.environ.get("NO_COLOR"):  # the NO_COLOR convention
        color = False
    try:
        # the project the first PATH lives in, as ruff does, not wherever the command runs
        first = targets[0].resolve()
        config = lint_config.load(config_path, first if first.is_dir() else first.parent)
        config = config.with_flags(_codes(select), _codes(ignore))
        version_text = airflow_version or config.airflow_version
        source = "--airflow-version" if airflow_version else "config"
        version = (
            AirflowVersion.parse(version_text, source) if version_text else AirflowVersion.detect()
        )
    except (ConfigError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc
    results = lint_paths(targets, config, version)
    changed = _fix(results, config, version, write=fix and not diff, show=diff)
    if output_format == "json":
        report = report_json.render(results, version)
    elif output_format == "sarif":
        report = report_sarif.render(results, version)
    else:
        limit = config.max_per_code if max_per_code is None else max_per_code
        report = report_text.render(results, version, limit)
    if output_file is not None:
        try:
            output_file.write_text(click.unstyle(report) + "\n", encoding="utf-8")
        except OSError as exc:
            raise click.UsageError(f"cannot write the report to {output_file}: {exc}") from exc
    elif diff:  # stdout carries the diff alone, so it pipes into `git apply` / `patch`
        click.echo(report, err=True, color=color)
    else:
        click.echo(report, color=color)
    sys.exit(_exit_status(results, changed and diff))


def _fix(
    results: list[FileResult],
    config: lint_config.LintConfig,
    version: AirflowVersion,
    *,
    write: bool,
    show: bool,
) -> bool:
    """Apply fixes (write) and/or print their diff (show); re-lint what was fixed."""
    if not (write or show):
        return False
    changed = False
    for i, result in enumerate(results):
        if result.text is None or not any(f.fix for f in result.findings):
            continue
        fixed, count = fixes.apply(result.text, result.findings)
        if not count or fixed == result.text:
            continue
        changed = True
        if show:
            click.echo(fixes.diff(result.path, result.text, fixed), nl=False)
        if write:
            try:
                with open(result.path, "w", encoding="utf-8", newline="") as handle:
                    handle.write(fixed)
            except OSError as exc:
                raise click.UsageError(f"cannot write the fix to {result.path}: {exc}") from exc
            results[i] = lint_source(fixed, result.path, config, version)
    return changed


def _exit_status(results: list[FileResult], pending_diff: bool) -> int:
    if any(r.parse_error for r in results):
        return EXIT_ERROR
    # info findings are advice: reported, but they do not fail a pre-commit hook or a CI job
    if pending_diff or any(f.severity is not Severity.INFO for r in results for f in r.findings):
        return EXIT_FINDINGS
    return EXIT_CLEAN
