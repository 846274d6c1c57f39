"""Run the checks over files: discovery, parsing, `# noqa`, selection and parse errors."""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from taskstate.lint.airflow_version import AirflowVersion
from taskstate.lint.checks import CHECKS, Context
from taskstate.lint.config import LintConfig
from taskstate.lint.finding import Finding
from taskstate.lint.rules import RULES
from taskstate.lint.source import Source

PARSE_ERROR = "TS901"
_NOQA = re.compile(r"#\s*noqa(?::[\s]?(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?", re.I)
# Hidden directories (.git, .venv, ...) are skipped too.
_SKIP_DIRS = frozenset({"venv", "__pycache__", "node_modules", "build", "dist", "site-packages"})


@dataclass
class FileResult:
    """One file's findings; a file that cannot be read or parsed has one parse-error finding."""

    path: str
    findings: list[Finding] = field(default_factory=list)
    text: str | None = None  # kept for --fix
    parse_error: bool = False


def lint_source(text: str, path: str, config: LintConfig, version: AirflowVersion) -> FileResult:
    """Every enabled finding for one file's text, minus the ones a `# noqa` silences."""
    result = FileResult(path, text=text)
    found: list[Finding] = []
    try:
        tree = ast.parse(text, filename=path)
        src = Source(path, text, tree)
        ctx = Context(version)
        for check in CHECKS:
            for finding in check(src, ctx):
                if config.enabled(finding.code, path) and not _silenced(src, finding):
                    found.append(finding)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        result.parse_error = True
        result.findings = [_parse_error(path, exc)]
        return result
    found.sort(key=lambda f: (f.line, f.col, f.code))
    result.findings = found
    return result


def lint_file(path: Path, config: LintConfig, version: AirflowVersion) -> FileResult:
    """Lint one file from disk; an unreadable or non-UTF-8 file gives a parse-error result."""
    shown = str(path)
    try:
        data = path.read_bytes()
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return FileResult(shown, [_parse_error(shown, exc)], parse_error=True)
    except OSError as exc:
        return FileResult(shown, [_parse_error(shown, exc)], parse_error=True)
    return lint_source(text, shown, config, version)


def iter_files(paths: Iterable[Path], config: LintConfig) -> Iterator[Path]:
    """Python files under `paths`: files named explicitly always; directories walked sorted."""
    for path in paths:
        if path.is_file():
            yield path
            continue
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(
                d
                for d in dirs
                if d not in _SKIP_DIRS
                and not d.startswith(".")
                and not d.endswith(".egg-info")
                and not config.excluded(Path(root, d))
            )
            for name in sorted(files):
                if name.endswith(".py"):
                    candidate = Path(root, name)
                    if not config.excluded(candidate):
                        yield candidate


def lint_paths(
    paths: Iterable[Path], config: LintConfig, version: AirflowVersion
) -> list[FileResult]:
    """Lint every Python file under `paths`, one result per file."""
    return [lint_file(path, config, version) for path in iter_files(paths, config)]


def _silenced(src: Source, finding: Finding) -> bool:
    if finding.line > len(src.lines):
        return False
    line = src.lines[finding.line - 1]
    if "noqa" not in line.lower():
        return False
    match = _NOQA.search(line)
    if match is None:
        return False
    codes = match.group("codes")
    if codes is None:
        return True  # a bare noqa comment silences everything on the line, as in flake8
    return finding.code in re.split(r"[,\s]+", codes.upper())


def _parse_error(path: str, exc: Exception) -> Finding:
    line = getattr(exc, "lineno", None) or 1
    col = getattr(exc, "offset", None) or 1
    if isinstance(exc, SyntaxError):
        detail = f"{exc.msg} (line {line})"
    elif isinstance(exc, UnicodeDecodeError):
        detail = "not UTF-8 text"
    elif isinstance(exc, RecursionError | MemoryError):
        detail = "nested too deeply to check"
    else:
        detail = str(exc)
    rule = RULES[PARSE_ERROR]
    return Finding(
        code=PARSE_ERROR,
        path=path,
        line=line,
        col=col,
        message=rule.message.format(error=detail),
        why=rule.why,
    )
