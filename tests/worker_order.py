"""The order in which ``make test``'s two workers take the test modules: the slowest first.

``make test`` runs the suite with ``pytest -n 2 --dist loadfile --no-loadscope-reorder``: a module stays on one
worker (its module fixtures are built once), and a worker that finishes a module takes the next one in the
collection's order. pytest-xdist's own order (its default "reorder") is by number of tests, most first; that put
the slow modules with one test (the demo, the README's quickstart, the secret-leak scan) last, where one worker
ran them alone while the other had nothing left. Longest first (the "LPT" rule of scheduling) leaves only short
modules for the end, so both workers finish at about the same time.

:data:`MODULE_SECONDS` holds the slowest modules' measured seconds; every other module counts as shorter than
these, and those are ordered as pytest-xdist would (most tests first).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

MODULE_SECONDS: dict[str, float] = {
    "tests/reliability/test_crash_points_fleet_analysis.py": 574,
    "tests/reliability/test_crash_points_patch.py": 348,
    "tests/reliability/test_crash_points_fleet.py": 344,
    "tests/reliability/test_crash_points_patch_analysis.py": 220,
    "tests/test_demo.py": 212,
    "tests/test_example_dags.py": 195,
    "tests/reliability/test_secret_leaks.py": 110,
    "tests/packaging/test_wheel.py": 102,
    "tests/reliability/test_chaos_rollout.py": 101,
    "tests/test_readme_quickstart.py": 77,
    "tests/test_example_progressive_rollout.py": 72,
    "tests/plugins/test_rollouts_plugin.py": 66,
    "tests/plugins/test_rollouts_actions.py": 58,
    "tests/plugins/test_rollouts_record.py": 41,
    "tests/emulator/test_emulator_server.py": 40,
    "tests/test_provider.py": 40,
    # make test's end-to-end part (its own pytest run, two modules at a time), measured 2026-11-29
    "tests/e2e/test_e2e_sqlite.py": 230,
    "tests/e2e/test_e2e_inconclusive.py": 150,
    "tests/e2e/test_e2e_postgres.py": 130,
    "tests/e2e/test_e2e_guard.py": 85,
    "tests/e2e/test_e2e_prometheus.py": 75,
}
"""Seconds each of the slowest modules took on a busy two-core machine (2026-11-27: the lead's ``--durations`` run
of the suite, the crash-point modules from a run of their own): only their order matters. A module that became
slow belongs here; one that no longer exists fails ``tests/test_worker_order.py``."""


class Item(Protocol):
    """What the ordering reads of a collected test: its node id (``path::name[params]``)."""

    nodeid: str


def module_of(nodeid: str) -> str:
    """The module part of a node id."""
    return nodeid.split("::", 1)[0]


def slowest_modules_first(items: Sequence[Item]) -> list[Item]:
    """``items`` with the modules of :data:`MODULE_SECONDS` first, slowest first, then the other modules by
    number of tests (most first); a module's tests stay together and in their order."""
    tests_in: dict[str, int] = {}
    for item in items:
        module = module_of(item.nodeid)
        tests_in[module] = tests_in.get(module, 0) + 1

    def key(item: Item) -> tuple[float, int, str]:
        module = module_of(item.nodeid)
        return -MODULE_SECONDS.get(module, 0.0), -tests_in[module], module

    return sorted(items, key=key)  # stable: a module's tests keep their order
