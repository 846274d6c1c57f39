"""README and docs/ link only inside the repository, and every link lands: the file exists and,
for `page.md#anchor`, so does the heading (GitHub's anchor rule)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces become hyphens."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    headings = re.findall(r"^#+\s+(.*)$", text, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_link_stays_in_the_repository_and_lands() -> None:
    broken = []
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        for target in LINK.findall(text):
            where = f"{page.relative_to(ROOT)} -> {target}"
            if re.match(r"[a-z]+:", target):
                broken.append(f"{where}: outside the repository")
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{where}: no such file")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
                broken.append(f"{where}: no such heading")
    assert not broken, "\n".join(broken)


def test_the_index_leads_to_every_page() -> None:
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    linked = {target.partition("#")[0] for target in LINK.findall(index)}
    missing = {p.name for p in PAGES[1:] if p.name != "index.md"} - linked
    assert not missing, missing
