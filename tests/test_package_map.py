"""``docs/package-map.md`` is what the code says (``scripts/package_map.py`` renders it from the sources), and the
house it draws keeps its rules: every arrow between packages points down the floors, no module is past ~700 lines
(a module that big holds more than one concern: split it along a seam its file names can show), and a family
folder imports only what its package shares, never another family."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
MAX_MODULE_LINES = 700


def package_map() -> ModuleType:
    spec = importlib.util.spec_from_file_location("package_map", ROOT / "scripts" / "package_map.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["package_map"] = module
    spec.loader.exec_module(module)
    return module


def test_the_package_map_page_is_what_the_code_says() -> None:
    pm = package_map()
    rendered = pm.render(pm.read_modules())
    assert pm.OUTPUT.read_text() == rendered, "docs/package-map.md drifted: run python scripts/package_map.py"


def test_every_arrow_between_packages_points_down() -> None:
    pm = package_map()
    order = [name for name, _ in pm.FLOORS]
    upward = []
    for module in pm.read_modules().values():
        source = pm.package_of(module.name)
        for imported in module.imports:
            target = pm.package_of(imported)
            if imported != pm.PACKAGE and order.index(target) < order.index(source):
                upward.append(f"{module.name} -> {imported}")
    assert not upward, f"imports that point up the house: {sorted(upward)}"


def test_no_module_is_past_the_house_size() -> None:
    pm = package_map()
    big = sorted(
        f"{module.name} ({module.lines})" for module in pm.read_modules().values() if module.lines > MAX_MODULE_LINES
    )
    assert not big, f"modules past {MAX_MODULE_LINES} lines: {big}"


def test_a_family_imports_only_what_its_package_shares() -> None:
    """A family (``tasks.patch``, ``tasks.fleet``) imports its own modules and the shared part of its package (the
    loose modules, the other folders), never another family; the shared part imports no family. Every import
    counts: in a function, under ``TYPE_CHECKING``."""
    pm = package_map()
    crossing = []
    for module in pm.read_modules().values():
        for package in pm.FAMILIES:
            if not module.name.startswith(f"{pm.PACKAGE}.{package}."):
                continue
            own = pm.family_of(module.name)
            for imported in sorted(module.uses):
                family = pm.family_of(imported)
                if family is not None and family != own:
                    crossing.append(f"{module.name} -> {imported}")
    assert not crossing, f"imports across families, or from the shared part into a family: {crossing}"


def test_every_family_is_a_folder_of_its_package() -> None:
    pm = package_map()
    for package, families in pm.FAMILIES.items():
        for family in families:
            assert (pm.ROOT / pm.PACKAGE / package / family / "__init__.py").is_file(), f"{package}/{family}/"
