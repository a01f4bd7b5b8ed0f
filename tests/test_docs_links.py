"""What the documentation pages say of the README points at something the README has: a section named in
quotes after "README" (``the README ("Quickstart: ...")``) or a link to ``README.md#anchor`` must name one of the
README's headings. Links between the pages themselves are checked by the docs build (``make docs``: Sphinx with
warnings as errors reports a link to a page or anchor that does not exist)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(
    path for pattern in ("*.md", "*.rst") for path in (ROOT / "docs").rglob(pattern) if "_build" not in path.parts
)
_QUOTED_SECTION = re.compile(r"README[^\n(]{0,20}\(\s*\"([^\"]+)\"\s*\)")
_ANCHOR_LINK = re.compile(r"README\.md#([A-Za-z0-9_-]+)")


def readme_headings() -> dict[str, str]:
    """The README's headings, by GitHub/MyST anchor (lower case, spaces to dashes, punctuation dropped)."""
    headings = {}
    for line in (ROOT / "README.md").read_text().splitlines():
        match = re.match(r"#{1,6}\s+(.*)", line)
        if match:
            title = match.group(1).strip()
            anchor = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
            headings[anchor] = title
    return headings


def test_the_docs_name_only_readme_sections_that_exist() -> None:
    headings = readme_headings()
    titles = set(headings.values())
    wrong = []
    for page in PAGES:
        text = page.read_text()
        for section in _QUOTED_SECTION.findall(text):
            if section not in titles:
                wrong.append(f"{page.relative_to(ROOT)}: README section {section!r}")
        for anchor in _ANCHOR_LINK.findall(text):
            if anchor not in headings:
                wrong.append(f"{page.relative_to(ROOT)}: README.md#{anchor}")
    assert not wrong, f"the docs point at README sections that do not exist ({sorted(titles)}): {wrong}"


def test_the_check_sees_a_missing_section() -> None:
    # The pattern the quickstart once used: a README section that never existed.
    assert _QUOTED_SECTION.findall('The options are in the README ("Test your rollout DAGs offline").') == [
        "Test your rollout DAGs offline"
    ]
    assert "test-your-rollout-dags-offline" not in readme_headings()
