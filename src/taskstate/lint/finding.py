"""What a check reports: a finding at a place in a file, its before/after, an optional fix."""

from __future__ import annotations

from dataclasses import dataclass, field

from taskstate.lint.rules import RULES, Severity


@dataclass(frozen=True)
class Edit:
    """Replace source[start:end] (character offsets into the file's text) with `text`."""

    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Fix:
    """A mechanical fix: text edits, plus any module-level import the edited code needs."""

    edits: tuple[Edit, ...]
    # a module-level import statement the edited code needs, e.g. "from datetime import timezone"
    needs_import: str | None = None
    title: str = "apply the suggested change"


@dataclass(frozen=True)
class Finding:
    """One reported problem: rule code, 1-based position, message, reason and a before/after."""

    code: str
    path: str
    line: int  # 1-based
    col: int  # 1-based, like flake8 and ruff
    message: str
    why: str
    before: str = ""
    after: str = ""
    fix: Fix | None = field(default=None, compare=False)

    @property
    def severity(self) -> Severity:
        """The severity of the finding's rule."""
        return RULES[self.code].severity

    @property
    def location(self) -> str:
        """The finding's position as "path:line:col"."""
        return f"{self.path}:{self.line}:{self.col}"
