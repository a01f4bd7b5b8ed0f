"""Every crash point of the rollback task on every path
(the scenarios: :mod:`tests.reliability.crash_scenarios`)."""

from __future__ import annotations

import pytest

from tests.reliability.crash_points import PATHS, Harness, Scenario
from tests.reliability.crash_scenarios import ROLLBACK_SCENARIOS, scenario_id, sweep_and_check
from tests.reliability.support import Report


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("scenario", ROLLBACK_SCENARIOS, ids=scenario_id)
def test_every_crash_point_keeps_every_invariant(
    harness: Harness, report: Report, scenario: Scenario, path: str
) -> None:
    sweep_and_check(harness, report, scenario, path)
