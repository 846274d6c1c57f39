"""`--fix` / `--diff`: apply the mechanical fixes findings carry, and show them as a diff.

A fixed file must still parse; if it would not, it is left alone.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Iterable

from taskstate.lint.finding import Edit, Finding
from taskstate.lint.source import physical_lines


def apply(text: str, findings: Iterable[Finding]) -> tuple[str, int]:
    """The text with every non-overlapping fix applied, and how many fixes went in."""
    edits: list[Edit] = []
    imports: list[str] = []
    for finding in findings:
        if finding.fix is None:
            continue
        edits.extend(finding.fix.edits)
        if finding.fix.needs_import and finding.fix.needs_import not in imports:
            imports.append(finding.fix.needs_import)
    if not edits:
        return text, 0
    applied = 0
    last_start = len(text) + 1
    for edit in sorted(edits, key=lambda e: e.start, reverse=True):
        if edit.end > last_start:
            continue  # overlaps one already applied
        text = text[: edit.start] + edit.text + text[edit.end :]
        last_start = edit.start
        applied += 1
    for statement in imports:
        text = _add_import(text, statement)
    try:
        ast.parse(text)
    except SyntaxError:
        return text, 0
    return text, applied


def _add_import(text: str, statement: str) -> str:
    """Insert `statement` after the file's `from datetime import ...`, else its last import."""
    tree = ast.parse(text)
    module = statement.split()[1]
    anchor: ast.stmt | None = None
    docstring_end = 0
    for stmt in tree.body:
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            if isinstance(stmt, ast.ImportFrom) and stmt.module == module:
                anchor = stmt
                break
            anchor = stmt
        elif anchor is None and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            docstring_end = stmt.end_lineno or 0
        elif anchor is not None:
            break
    lines = physical_lines(text)
    at = (anchor.end_lineno or anchor.lineno) if anchor is not None else docstring_end
    newline = "\r\n" if "\r\n" in text else "\n"  # keep the file's own line endings
    if at == len(lines) and lines and not lines[-1].endswith("\n"):
        lines[-1] += newline
    lines.insert(at, statement + newline)
    return "".join(lines)


def diff(path: str, before: str, after: str) -> str:
    """A unified diff of one file's text before and after its fixes."""
    return "".join(
        difflib.unified_diff(
            physical_lines(before),
            physical_lines(after),
            fromfile=path if path.startswith("/") else f"a/{path}",
            tofile=path if path.startswith("/") else f"b/{path}",
        )
    )
