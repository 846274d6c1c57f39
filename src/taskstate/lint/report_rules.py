"""`taskstate lint --rules`: the rule table as text, or as the Markdown table in README.md.

README's table is this output (`taskstate lint --rules --format markdown`), checked by a test,
so it cannot drift from `RULES`.
"""

from __future__ import annotations

import re

from taskstate.lint.rules import RULES

_FACT = re.compile(r"\{(\w+)\}")


def text() -> str:
    """The rule table as plain text: one line per rule with its severity, name and reason."""
    lines = []
    for rule in RULES.values():
        fixable = " (fixable)" if rule.fixable else ""
        lines.append(f"{rule.code}  {rule.severity.value:<7}  {rule.name}{fixable}: {rule.why}")
    return "\n".join(lines)


def markdown() -> str:
    """The rule table as the Markdown table README.md shows."""
    rows = ["| code | name | severity | message | fix |", "|---|---|---|---|---|"]
    for rule in RULES.values():
        message = _FACT.sub(r"‹\1›", rule.message).replace("|", "\\|")
        fix = " yes |" if rule.fixable else " |"
        rows.append(f"| `{rule.code}` | {rule.name} | {rule.severity.value} | {message} |{fix}")
    return "\n".join(rows)
