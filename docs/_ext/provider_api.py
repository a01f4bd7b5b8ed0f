"""Sphinx directives that read the provider's code, so the pages cannot drift from it.

``connection-fields`` renders the connection form's extra fields from
``airflow_provider.get_provider_info.CONN_FIELDS``.

``.. provider-modules:: airflow_provider.operators`` expands to one section per public submodule (names
not starting with ``_``), each an ``automodule`` with the configured autodoc defaults. A module added to
the package later appears in the API reference without editing the docs.

Options: ``:exclude:`` (comma-separated module names to leave out) and ``:modules-only:`` (skip
subpackages, for a package whose subpackages have pages of their own).
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


def public_modules(package_name: str, *, modules_only: bool, exclude: set[str]) -> list[str]:
    """Full names of the public submodules of ``package_name``, sorted."""
    package = importlib.import_module(package_name)
    found = []
    for info in pkgutil.iter_modules(package.__path__, f"{package_name}."):
        short = info.name.rsplit(".", 1)[1]
        if short.startswith("_") or info.name in exclude or short in exclude:
            continue
        if modules_only and info.ispkg:
            continue
        found.append(info.name)
    return sorted(found)


class ProviderModules(SphinxDirective):
    """Document every public module of the package given as argument."""

    required_arguments = 1
    option_spec = {"exclude": directives.unchanged, "modules-only": directives.flag}

    def run(self) -> list[nodes.Node]:
        package_name = self.arguments[0]
        exclude = {name.strip() for name in self.options.get("exclude", "").split(",") if name.strip()}
        names = public_modules(package_name, modules_only="modules-only" in self.options, exclude=exclude)
        if not names:
            raise self.error(f"provider-modules: no public module in {package_name}")
        lines: list[str] = []
        for name in names:
            module = importlib.import_module(name)
            if module.__file__:
                self.env.note_dependency(module.__file__)
            title = f"``{name}``"
            lines += [title, "-" * len(title), "", f".. automodule:: {name}", ""]
        return self.parse_text_to_nodes("\n".join(lines), allow_section_headings=True)


class ConnectionFields(SphinxDirective):
    """A table of the connection form's extra fields, read from ``get_provider_info.CONN_FIELDS``."""

    def run(self) -> list[nodes.Node]:
        from airflow_provider.get_provider_info import CONN_FIELDS

        self.env.note_dependency(importlib.import_module("airflow_provider.get_provider_info").__file__ or "")
        rows = [
            ".. list-table::",
            "   :header-rows: 1",
            "   :widths: 18 22 10 10 40",
            "",
            "   * - Extra",
            "     - Form label",
            "     - Type",
            "     - Default",
            "     - Meaning",
        ]
        for name, field in CONN_FIELDS.items():
            schema = field.get("schema", {})
            kinds = schema.get("type", [])
            kind = next((k for k in ([kinds] if isinstance(kinds, str) else kinds) if k != "null"), "")
            default = schema.get("default")
            shown = "" if default is None else f"``{str(default).lower() if isinstance(default, bool) else default}``"
            rows += [
                f"   * - ``{name}``",
                f"     - {field['label']}",
                f"     - {kind}",
                f"     - {shown}",
                f"     - {field.get('description', '')}",
            ]
        return self.parse_text_to_nodes("\n".join(rows))


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("provider-modules", ProviderModules)
    app.add_directive("connection-fields", ConnectionFields)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
