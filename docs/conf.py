"""Sphinx configuration of the provider's documentation site (``make docs``)."""

from __future__ import annotations

import atexit
import importlib
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from docutils.nodes import Element
    from sphinx.addnodes import pending_xref
    from sphinx.application import Sphinx
    from sphinx.environment import BuildEnvironment

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent

# autodoc imports the provider, and the provider imports Airflow: give Airflow a throwaway home so a docs
# build never writes airflow.cfg or a database into ~/airflow (or into a real AIRFLOW_HOME).
_AIRFLOW_HOME = tempfile.mkdtemp(prefix="provider-docs-airflow-home-")
os.environ["AIRFLOW_HOME"] = _AIRFLOW_HOME
atexit.register(shutil.rmtree, _AIRFLOW_HOME, ignore_errors=True)

sys.path.insert(0, str(REPO))
sys.path.insert(0, str(DOCS / "_ext"))

# Import the Airflow-facing modules (and so Airflow) before Sphinx's autodoc machinery is in play, and every
# pydantic model of the emulator (and FastAPI's) too: once autodoc has documented a pydantic model (the
# analysis page comes first), pydantic cannot build a model with extra="allow" any more ("The type
# annotation for `__pydantic_extra__` must be `dict[str, ...]`").
import airflow_provider.emulator.web.app  # noqa: E402
import airflow_provider.operators.deployment_service  # noqa: E402, F401
from airflow_provider import __version__  # noqa: E402

project = "Deployment Management Service provider for Apache Airflow"
author = "airflow-provider-deployment-service contributors"
copyright = "the airflow-provider-deployment-service contributors; Apache-2.0"
version = release = __version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.viewcode",
    "myst_parser",
    "provider_api",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store"]

# Markdown pages (the generated reports and the changelog) get anchors for their headings.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

# autodoc: whole modules, members in source order, signatures without the repeated type noise.
autodoc_default_options = {
    "members": True,
    "show-inheritance": True,
    "member-order": "bysource",
}
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented_params"
autodoc_preserve_defaults = True
autodoc_class_signature = "separated"
autoclass_content = "class"

# Every cross-reference must resolve, except the types of libraries whose inventories this offline
# build cannot fetch (Airflow, pydantic, httpx, FastAPI, the standard library...).
nitpicky = True
nitpick_ignore_regex = [
    (
        r"py:.*",
        r"(airflow|pydantic|pydantic_core|httpx|fastapi|starlette|uvicorn|pytest|_pytest|annotated_types"
        r"|datetime|collections|typing|typing_extensions|types|logging|random|ssl|socket|pathlib|enum"
        r"|asyncio|subprocess|threading|concurrent|contextlib|functools|json|re|os|io|urllib)(\..*)?",
    ),
    # Airflow's task-facing names as the docstrings spell them (``AirflowFailException``, ...).
    (
        r"py:.*",
        r"(Airflow\w*|PokeReturnValue|TriggerEvent|BaseTrigger|BaseEventTrigger|BaseOperator|BaseSensorOperator"
        r"|BaseHook|BaseNotifier|Context|timedelta)",
    ),
    # Types of Airflow's API server and SQLAlchemy as the Rollouts view's signatures name them.
    (r"py:.*", r"(BaseUser|BaseAuthManager|DagAccessEntity|TaskInstanceKey|Session|ColumnElement)"),
    # Private helpers (a leading underscore) are deliberately not documented: a public class may still
    # name its private base, and a TypeVar shows up in generic signatures.
    (r"py:.*", r"([\w.]+\.)?_\w+"),
    (r"py:.*", r"airflow_provider\.client\.\w+\.T"),
]
nitpick_ignore = [
    # An instance attribute set in RevisionCheckSchedule.__init__ without a docstring: autodoc cannot see it.
]


def _resolve_short_names(app: Sphinx, env: BuildEnvironment, node: pending_xref, contnode: Element) -> Element | None:
    """Resolve a reference by the end of its name when it is unique (``:class:`EmulatorServer``` written in
    another module's docstring): the docstrings name classes the way a reader of that module would."""
    if node.get("refdomain") != "py" or node.get("refspecific"):
        return None
    domain = env.domains["py"]
    node["refspecific"] = True
    try:
        return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], node["reftarget"], node, contnode)
    finally:
        node["refspecific"] = False


def _defined_at(target: str) -> str | None:
    """Where an object named through a module that re-exports it is defined (and documented):
    ``airflow_provider.tasks.rollback.RollbackStarted.record`` -> ``airflow_provider.tasks.rollback.outcome.
    RollbackStarted.record``; ``None`` when the name is not an importable class or function, or is defined there."""
    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        found = getattr(module, parts[cut], None)
        home, name = getattr(found, "__module__", None), getattr(found, "__qualname__", None)
        if not isinstance(home, str) or not isinstance(name, str) or home == module.__name__:
            return None
        return ".".join([home, name, *parts[cut + 1 :]])
    return None


def _resolve_re_exports(app: Sphinx, env: BuildEnvironment, node: pending_xref, contnode: Element) -> Element | None:
    """Resolve a reference written through a public path that re-exports the object (the way code imports it:
    ``airflow_provider.tasks.rollback.start_rollback``) to the module that defines and documents it."""
    if node.get("refdomain") != "py":
        return None
    defined = _defined_at(node["reftarget"])
    if defined is None:
        return None
    domain = env.domains["py"]
    return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], defined, node, contnode)


_HTML_TAG = re.compile(r"<(?=/?[A-Za-z!])")


def _escape_html_in_report_tables(app: Sphinx, docname: str, source: list[str]) -> None:
    """The generated reports quote service answers (an HTML error page) in table cells as plain text:
    show those tags as text instead of letting them into the page."""
    if docname == "RELIABILITY":
        source[0] = "\n".join(
            _HTML_TAG.sub("&lt;", line) if line.startswith("|") else line for line in source[0].splitlines()
        )


def setup(app: Sphinx) -> None:
    app.connect("missing-reference", _resolve_short_names)
    app.connect("missing-reference", _resolve_re_exports)
    app.connect("source-read", _escape_html_in_report_tables)


html_theme = "furo"
html_title = f"Deployment Management Service provider {release}"
html_static_path: list[str] = []
html_show_sourcelink = False
