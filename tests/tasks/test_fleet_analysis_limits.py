"""What the fleet task's analysis does not do yet (issue 31: dry runs, checks judged against the baseline; the fleet
runs no preflight yet) is refused when the DAG is parsed, instead of being ignored."""

from __future__ import annotations

import pytest

from airflow_provider.analysis import Analysis, TracingProjectCheck
from airflow_provider.analysis.rate_test import RateTest
from airflow_provider.operators.deployment_service import FleetRolloutOperator


def test_what_the_fleet_does_not_do_yet_is_refused_at_parse_time() -> None:
    with pytest.raises(ValueError, match="dry_run is not supported by FleetRolloutOperator yet"):
        FleetRolloutOperator(
            task_id="f",
            deployment_names=["a"],
            repo_ref="v2",
            analysis=Analysis(checks=[TracingProjectCheck()], count=1, dry_run=True),
        )
    on_baseline = TracingProjectCheck(rate_test=RateTest())
    with pytest.raises(ValueError, match="judged against the baseline, which FleetRolloutOperator does not keep yet"):
        FleetRolloutOperator(
            task_id="f", deployment_names=["a"], repo_ref="v2", analysis=Analysis(checks=[on_baseline], count=1)
        )
