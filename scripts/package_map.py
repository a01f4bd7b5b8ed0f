"""Render ``docs/package-map.md``: every module of ``airflow_provider``, what it does (its docstring's first
sentence), its size, and which of the provider's modules it imports; then the packages and the arrows between
them, in the order of the house's floors (``shared/STYLE.md``: arrows point down).

    python scripts/package_map.py           # rewrite docs/package-map.md
    python scripts/package_map.py --check   # exit 1 when docs/package-map.md is not what the code says

Read from the code only (``ast``: nothing is imported), so the page cannot drift: ``tests/test_package_map.py``
fails when the committed page differs from what this script renders.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "airflow_provider"
OUTPUT = ROOT / "docs" / "package-map.md"
SKIPPED_PARTS = ("__pycache__", "data")
"""Folders that hold no code of the provider's own (the emulator's generated example data)."""

FLOORS: list[tuple[str, str]] = [
    ("plugins", "the Rollouts view in Airflow's UI: its FastAPI app, pages and the records it reads"),
    ("operators", "the tasks users put in DAGs (one module per family)"),
    ("sensors", "the rollout sensor (a sibling of the operators)"),
    ("tasks", "what every task shares (the task base, its steps, the rollback step) and one folder per task family"),
    ("triggers", "the triggers, over one batched poller per connection"),
    ("analysis", "analysis gates: pure definitions and verdict rules, then the measuring side"),
    ("hooks", "Airflow glue: connection to client settings, connection form, test_connection"),
    ("client", "the one transport: each request built and each answer read once (sans-I/O), its settings inside"),
    ("decisions", "the pure rules of a rollout: no HTTP, no Airflow, no I/O"),
    ("(root)", "the package's face: what Airflow reads, the assets DAGs use, constants and errors all layers share"),
    ("emulator", "a local implementation of the service (depends on the models only, never on the client)"),
    ("models", "the service's resources and requests (pydantic; no Airflow, no HTTP)"),
]
"""The packages from the top floor down; ``(root)`` stands for the modules directly under ``airflow_provider``."""

FAMILIES: dict[str, dict[str, str]] = {
    "tasks": {
        "patch": "the patch task's steps, bases of `PatchDeploymentOperator`",
        "fleet": "the fleet task's worker side, under `FleetRolloutOperator`",
    },
}
"""Packages made of one folder per family beside what the families share (the package's loose modules and its
other folders: ``tasks.rollback``, the rollback step, is shared). A family imports the shared part, never another
family, and the shared part imports no family: every import counts, those in functions and under
``TYPE_CHECKING`` too (``tests/test_package_map.py``)."""


@dataclass
class Module:
    """One module of the package, as its source shows it."""

    name: str
    path: Path
    lines: int
    summary: str
    imports: set[str] = field(default_factory=set)
    """Provider modules imported when this one is imported (not inside functions nor under TYPE_CHECKING)."""
    uses: set[str] = field(default_factory=set)
    """Provider modules imported anywhere in this one (in functions and under TYPE_CHECKING too)."""


def package_of(module: str) -> str:
    """The floor a module lives on: its first part under ``airflow_provider``, or ``(root)``."""
    parts = module.split(".")
    if len(parts) == 2 and parts[1] not in {name for name, _ in FLOORS}:
        return "(root)"
    return parts[1] if len(parts) > 1 else "(root)"


def module_name(path: Path) -> str:
    relative = path.relative_to(ROOT).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def first_sentence(docstring: str | None) -> str:
    """The docstring's first sentence, on one line (up to its first ``. `` or blank line), without markup."""
    if not docstring:
        return ""
    paragraph = docstring.strip().split("\n\n")[0]
    text = " ".join(line.strip() for line in paragraph.splitlines())
    end = text.find(". ")
    sentence = text if end < 0 else text[: end + 1]
    for mark in (":class:", ":func:", ":mod:", ":meth:", ":data:", ":attr:", ":doc:"):
        sentence = sentence.replace(mark, "")
    sentence = sentence.replace("``", "`").replace("~", "").replace("|", "\\|")
    return sentence


def _resolved(node: ast.ImportFrom, current: str, is_package: bool) -> str | None:
    if node.level == 0:
        return node.module
    base = current.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _imported(node: ast.Import | ast.ImportFrom, current: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules one import statement names."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    target = _resolved(node, current, is_package)
    if target is None:
        return set()
    # "from package import module" names a module; "from module import name" names the module
    return {f"{target}.{alias.name}" if f"{target}.{alias.name}" in known else target for alias in node.names}


def load_time_imports(tree: ast.Module, current: str, is_package: bool, known: set[str]) -> set[str]:
    """The provider modules a module imports at load time: its top-level statements (``if``/``try`` blocks
    included), never a function's body nor an ``if TYPE_CHECKING:`` block."""
    found: set[str] = set()

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.If):
                test = node.test
                checking = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                    isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
                )
                if not checking:
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                found.update(_imported(node, current, is_package, known))

    visit(tree.body)
    return {name for name in found if name in known and name != current}


def imports_anywhere(tree: ast.Module, current: str, is_package: bool, known: set[str]) -> set[str]:
    """The provider modules a module imports anywhere: at load time, in a function's body or under
    ``if TYPE_CHECKING:``."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update(_imported(node, current, is_package, known))
    return {name for name in found if name in known and name != current}


def family_of(module: str) -> tuple[str, str] | None:
    """The package of :data:`FAMILIES` and the family a module belongs to, or ``None`` (a shared module, or a
    module of another package)."""
    for package, families in FAMILIES.items():
        for family in families:
            prefix = f"{PACKAGE}.{package}.{family}"
            if module == prefix or module.startswith(prefix + "."):
                return package, family
    return None


def read_modules() -> dict[str, Module]:
    paths = sorted(
        path
        for path in (ROOT / PACKAGE).rglob("*.py")
        if not any(part in SKIPPED_PARTS for part in path.relative_to(ROOT / PACKAGE).parts[:-1])
    )
    known = {module_name(path) for path in paths}
    modules: dict[str, Module] = {}
    for path in paths:
        source = path.read_text()
        tree = ast.parse(source)
        name = module_name(path)
        modules[name] = Module(
            name=name,
            path=path,
            lines=len(source.splitlines()),
            summary=first_sentence(ast.get_docstring(tree)),
            imports=load_time_imports(tree, name, path.name == "__init__.py", known),
            uses=imports_anywhere(tree, name, path.name == "__init__.py", known),
        )
    return modules


def short(name: str) -> str:
    return name[len(PACKAGE) + 1 :] if name.startswith(PACKAGE + ".") else name


def render(modules: dict[str, Module]) -> str:
    by_floor: dict[str, list[Module]] = defaultdict(list)
    for module in modules.values():
        if module.name == PACKAGE:
            continue
        by_floor[package_of(module.name)].append(module)
    arrows: dict[str, set[str]] = defaultdict(set)
    for module in modules.values():
        for imported in module.imports:
            source, target = package_of(module.name), package_of(imported)
            if source != target and imported != PACKAGE:
                arrows[source].add(target)
    order = [name for name, _ in FLOORS]
    out = [
        "# Package map",
        "",
        "<!-- Generated by scripts/package_map.py from the code; tests/test_package_map.py fails when it drifts. -->",
        "",
        "What each module of `airflow_provider` does and which of the provider's modules it imports when it is",
        "imported (imports inside functions, which load on first use, and type-checking imports are left out).",
        "The packages are listed from the top floor down: an arrow points down, never up, and no two modules",
        "import each other (`tests/test_layering.py`). Regenerate with `python scripts/package_map.py`.",
        "",
        "## Packages and their arrows",
        "",
        "| Package | What it holds | Modules | Lines | Imports from |",
        "|---|---|---|---|---|",
    ]
    for name, role in FLOORS:
        members = by_floor.get(name, [])
        targets = sorted(arrows.get(name, set()), key=order.index)
        out.append(
            f"| `{name}` | {role} | {len(members)} | {sum(module.lines for module in members):,} | "
            f"{', '.join(f'`{target}`' for target in targets) or '-'} |"
        )
    out += render_families(modules)
    for name, role in FLOORS:
        members = sorted(by_floor.get(name, []), key=lambda module: module.name)
        if not members:
            continue
        out += ["", f"## `{name}`", "", role[0].upper() + role[1:] + ".", ""]
        out += ["| Module | Lines | What it does | Imports (provider modules) |", "|---|---|---|---|"]
        for module in members:
            imported = ", ".join(f"`{short(name)}`" for name in sorted(module.imports) if name != PACKAGE)
            out.append(f"| `{short(module.name)}` | {module.lines} | {module.summary} | {imported or '-'} |")
    return "\n".join(out) + "\n"


def render_families(modules: dict[str, Module]) -> list[str]:
    """The section that names each package's families and what each uses of the shared part."""
    out = ["", "## Families", ""]
    for package, families in FAMILIES.items():
        names = ", ".join(f"`{package}.{family}`" for family in families)
        folders = sorted(
            short(module.name)
            for module in modules.values()
            if module.path.name == "__init__.py"
            and module.name.rpartition(".")[0] == f"{PACKAGE}.{package}"
            and family_of(module.name) is None
        )
        shared = ", ".join(f"`{folder}`" for folder in folders)
        out += [
            f"`{package}` holds one folder per family ({names}) beside what the families share: the package's",
            f"loose modules and its other folders ({shared or 'none'}). A family imports the shared part, never",
            "another family, and the shared part imports no family (every import counts, those in functions too;",
            "`tests/test_package_map.py`).",
            "",
            "| Family | What it holds | Modules | Lines | Shared modules it imports |",
            "|---|---|---|---|---|",
        ]
        for family, role in families.items():
            members = [module for module in modules.values() if family_of(module.name) == (package, family)]
            shared = sorted(
                {
                    name
                    for module in members
                    for name in module.uses
                    if name.startswith(f"{PACKAGE}.{package}.") and family_of(name) is None
                }
            )
            out.append(
                f"| `{package}.{family}` | {role} | {len(members)} | {sum(module.lines for module in members):,} | "
                f"{', '.join(f'`{short(name)}`' for name in shared) or '-'} |"
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with docs/package-map.md instead of writing it")
    args = parser.parse_args(argv)
    text = render(read_modules())
    if args.check:
        if OUTPUT.read_text() != text:
            print(f"{OUTPUT.relative_to(ROOT)} is not what the code says: run python scripts/package_map.py")
            return 1
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
