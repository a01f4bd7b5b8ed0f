"""The order in which ``make test``'s workers take the test modules (:mod:`tests.worker_order`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tests.conftest import REPO_ROOT
from tests.worker_order import MODULE_SECONDS, slowest_modules_first


@dataclass
class Item:
    nodeid: str


def test_the_slowest_modules_come_first_and_each_module_stays_together_in_order() -> None:
    many = [Item(f"tests/test_many.py::test_{index}") for index in range(5)]
    few = [Item("tests/test_few.py::test_a"), Item("tests/test_few.py::test_b")]
    demo = [Item("tests/test_demo.py::test_demo_rolls_out_and_reports_what_landed")]
    crash = [
        Item("tests/reliability/test_crash_points_fleet_analysis.py::test_every_crash_point[b]"),
        Item("tests/reliability/test_crash_points_fleet_analysis.py::test_every_crash_point[a]"),
    ]
    # interleaved as no collection would be: the order still groups each module
    items = [few[0], many[0], demo[0], *many[1:3], crash[0], few[1], *many[3:], crash[1]]

    ordered = [item.nodeid for item in slowest_modules_first(items)]

    assert ordered == [item.nodeid for item in [*crash, *demo, *many, *few]]


def test_every_timed_module_exists_and_makefile_keeps_the_order() -> None:
    missing = [module for module in MODULE_SECONDS if not (REPO_ROOT / module).is_file()]
    assert not missing, f"timed modules that no longer exist (drop or rename them in MODULE_SECONDS): {missing}"
    makefile = (REPO_ROOT / "Makefile").read_text()
    unit = re.search(r"pytest -n 2 (.*)-m \"not e2e and not alone\"", makefile)
    assert unit is not None, "make test's xdist command line changed: check tests/worker_order.py still applies"
    assert "--dist loadfile" in unit.group(1) and "--no-loadscope-reorder" in unit.group(1), (
        f"without --no-loadscope-reorder pytest-xdist reorders the modules by test count: {unit.group(0)!r}"
    )
