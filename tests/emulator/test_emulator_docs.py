"""The emulator's page documents every route of its control API: the table in ``docs/emulator.rst`` is checked
against the routes the emulator's app really serves, so a route added to the code without a row fails here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from airflow_provider.emulator.state import EmulatorState
from airflow_provider.emulator.web.app import create_app

DOCS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "emulator.rst"
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
_CONTROL_PATH = re.compile(r"/_emulator[^`\s,]*")
_METHOD = re.compile(r"\b(" + "|".join(METHODS) + r")\b")


def served_control_routes() -> set[tuple[str, str]]:
    """``(method, path)`` of every ``/_emulator`` route the app serves, its path parameters written as the page
    writes them (``{id}``, ``{rid}``)."""
    app = create_app(EmulatorState(api_key="docs-check"))
    found: set[tuple[str, str]] = set()

    def walk(routes: list[Any], prefix: str = "") -> None:
        for route in routes:
            path = prefix + getattr(route, "path", "")
            methods = getattr(route, "methods", None)
            if methods is None and getattr(route, "routes", None) is not None:
                walk(route.routes, path)
                continue
            if path.startswith("/_emulator"):
                shown = path.replace("{deployment_id}", "{id}").replace("{revision_id}", "{rid}")
                found.update((method, shown) for method in methods or () if method in METHODS)

    walk(app.routes)
    return found


def documented_control_routes() -> set[tuple[str, str]]:
    """``(method, path)`` of every route named in the first column of the page's control API table (a row may
    name several methods of one path, ``GET``/``POST``/``DELETE /_emulator/x``, or several routes)."""
    text = DOCS_PAGE.read_text()
    section = text[text.index(".. list-table::", text.index("The control API")) :]
    table = re.split(r"\n\n(?=\S)", section, maxsplit=1)[0]  # up to the first unindented paragraph after it
    found: set[tuple[str, str]] = set()
    for row in re.split(r"\n   \* - ", table)[1:]:
        route_cell = row.split("\n     - ")[0]
        for part in route_cell.split(","):
            paths = _CONTROL_PATH.findall(part)
            methods = _METHOD.findall(part)
            found.update((method, path) for path in paths for method in methods)
    return found


def test_every_control_route_has_a_row_on_the_emulator_page() -> None:
    served = served_control_routes()
    documented = documented_control_routes()
    assert served, "the emulator's app serves no /_emulator route: the walk over its routes is broken"
    missing = sorted(served - documented)
    assert not missing, f"control routes without a row in docs/emulator.rst's table: {missing}"
    stale = sorted(documented - served)
    assert not stale, f"rows of docs/emulator.rst's table naming routes the emulator does not serve: {stale}"
