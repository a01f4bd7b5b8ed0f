"""``FleetRolloutOperator(analysis=...)`` across tries, against the emulator: an analysis that can never pass is
refused before the first PATCH; a wave's analysis that could not be measured at all fails the try while a
retry is left (the retry resumes from the saved progress, whatever the analysis's connection now says, and
analyses the wave again) and, on the last try, makes the wave's deployments inconclusive: failed, rolled
back. Assertions are on the emulator's real state and request log, and on the table and the failure."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred

from airflow_provider.analysis import Analysis, HttpCheck
from airflow_provider.decisions.fleet_progress import Outcome
from airflow_provider.operators.deployment_service import FleetRolloutOperator
from airflow_provider.triggers.analysis import DeploymentAnalysisTrigger
from tests.tasks.conftest import CONN_ENV, PATCH_ROUTE, FakeStore, FakeTI, connection_json, make_context, run_trigger
from tests.tasks.test_fleet_analysis import (
    FAST,
    assert_rolled_back,
    fleet,  # noqa: F401 (the fixture)
    fleet_op,
    ids_by_name,
    revisions,
    tracing_analysis,
)

OLD_IMAGE = "registry.example.com/acme/edge:1.0.0"
NEW_IMAGE = "registry.example.com/acme/edge:2.0.0"


def drive(
    make_task: Callable[[], FleetRolloutOperator],
    context: dict[str, Any],
    before_trigger: Callable[[Any], None] = lambda trigger: None,
) -> Any:
    """Run one try to its end (the table, or the exception raised), each deferral through its rebuilt trigger
    (``before_trigger`` sees it first), each resume on a fresh operator given the event only."""
    method, event = "execute", None
    while True:
        try:
            task = make_task()
            return task.execute(context) if event is None else getattr(task, method)(context, event)
        except TaskDeferred as deferred:
            _path, kwargs = deferred.trigger.serialize()
            trigger = type(deferred.trigger)(**json.loads(json.dumps(kwargs)))
            before_trigger(trigger)
            event = run_trigger(trigger)
            method = deferred.method_name
        except Exception as err:
            return err


# ------------------------------------------------------------------------------- P2-4: no custom_url
@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferrable"])
def test_an_http_check_on_custom_url_is_refused_before_the_first_patch(
    deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, deferrable: bool
) -> None:
    def edge(name: str, **source_config: Any) -> dict[str, Any]:
        return {
            "name": name,
            "source": "external_docker",
            "source_config": source_config,
            "source_revision_config": {"image_uri": OLD_IMAGE},
        }

    data = {"deployments": [edge("edge-a", custom_url="https://edge-a.example.com"), edge("edge-b")]}
    emulator = deployment_service_emulator_factory(data=data, **FAST)
    monkeypatch.setenv(CONN_ENV, connection_json(emulator.base_url, emulator.api_key))
    ids = ids_by_name(emulator)
    assert not emulator.state.deployment(ids["edge-b"])["source_config"].get("custom_url")
    analysis = Analysis(checks=[HttpCheck()], interval_seconds=0.1, count=1)
    task = fleet_op(
        deferrable, deployment_names=["edge-a", "edge-b"], image_uri=NEW_IMAGE, repo_ref=None, analysis=analysis
    )

    outcome = drive(task, make_context(FakeTI()))

    assert isinstance(outcome, AirflowFailException), outcome
    message = str(outcome)
    assert "the analysis can never pass, nothing was patched" in message
    assert "HttpCheck 'http {custom_url}/health' GETs '{custom_url}/health'" in message
    assert f"'edge-b' ({ids['edge-b']}) has no custom_url" in message and "'edge-a'" not in message
    assert emulator.state.count(PATCH_ROUTE) == 0
    assert all(len(revisions(emulator, deployment_id)) == 1 for deployment_id in ids.values())


# ------------------------------------------------------------------------------- P2-5: not measured
def break_tracing_connection(monkeypatch: pytest.MonkeyPatch, emulator: Any) -> None:
    """The default connection loses its extra ``tracing_base_url``: the tracing check can no longer run."""
    monkeypatch.setenv(CONN_ENV, connection_json(emulator.base_url, emulator.api_key, tracing_base_url=""))


@pytest.mark.parametrize("retries", [0, 1], ids=["no retry", "one retry"])
def test_a_wave_analysis_that_cannot_be_measured_rolls_the_wave_back_on_the_last_try(
    fleet: Any,  # noqa: F811 (the fixture imported above)
    monkeypatch: pytest.MonkeyPatch,
    retries: int,
) -> None:
    emulator = fleet(3)
    ids = ids_by_name(emulator)
    before = {name: emulator.state.deployment(ids[name])["active_revision_id"] for name in ids}
    store = FakeStore()

    def break_before_the_analysis(trigger: Any) -> None:  # the sources were fine when the task started
        if isinstance(trigger, DeploymentAnalysisTrigger):
            break_tracing_connection(monkeypatch, emulator)

    make = fleet_op(
        True,
        deployment_names=sorted(ids),
        canary=1,
        wave_size=2,
        max_failures=2,
        analysis=tracing_analysis(),
        retries=retries,
    )
    if retries:
        first = drive(make, make_context(FakeTI(1), store), break_before_the_analysis)
        assert type(first) is AirflowException, first  # retryable: the canary serves its new revision, unjudged
        assert "the analysis of canary could not be measured" in str(first)
        assert "a retry analyses them again" in str(first)
        canary = emulator.state.deployment(ids["app-0000"])
        assert canary["active_revision_id"] != before["app-0000"] and len(canary["revisions"]) == 2

    ti = FakeTI(retries + 1)  # the last try; with a retry, it resumes from the progress the first try saved
    outcome = drive(make, make_context(ti, store), break_before_the_analysis)

    assert isinstance(outcome, AirflowFailException), outcome
    assert "the canary failed" in str(outcome) and "nothing was patched" not in str(outcome)
    table = {row["name"]: row for row in ti.xcoms["return_value"]}
    row = table["app-0000"]
    assert_rolled_back(emulator, row, before["app-0000"])  # one patch, one rollback: the previous build serves
    assert row["analysis"]["verdict"] == "inconclusive"
    assert "the analysis could not be measured on the task's last try" in row["analysis"]["reason"]
    assert row["message"].startswith(f"analysis inconclusive (treated as failed) on revision {row['to_revision']}")
    assert [table[name]["outcome"] for name in ("app-0001", "app-0002")] == [Outcome.NOT_PATCHED] * 2
    assert all(len(revisions(emulator, ids[name])) == 1 for name in ("app-0001", "app-0002"))
    assert ti.xcoms["fleet_summary"]["analysis_failures"] == 1
    assert emulator.state.count(PATCH_ROUTE) == 1  # the canary's patch, once across the tries (nothing else)
