"""Code blocks of the documentation that tests run, found by the marker comment above each (``<!-- name ...
-->``), so that what a page shows is what a test ran."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"


def documented_block(page: str, marker: str) -> str:
    """The first fenced code block after ``<!-- marker`` on ``docs/<page>``.

    :param page: the page, relative to ``docs/`` (``guides/analysis.md``).
    :param marker: the name the comment starts with (``prometheus:scrape-config``).
    :raises AssertionError: naming the page and marker when either is missing.
    """
    text = (DOCS / page).read_text()
    start = text.find(f"<!-- {marker}")
    assert start >= 0, f"docs/{page} has no <!-- {marker} --> marker"
    found = re.compile(r"```[a-z]*\n(.*?)```", re.S).search(text, start)
    assert found is not None, f"docs/{page}: no code block after the {marker} marker"
    return found.group(1)
