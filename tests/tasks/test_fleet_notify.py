"""``FleetRolloutOperator(notify={...})`` against the emulator (issue 32): once the rollout is decided, each deployment
it landed, whose analysis failed it or that it rolled back is notified, and a rollout that stopped early sends
``fleet_aborted`` naming the deployments that failed; what each notification says agrees with the emulator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.analysis import Analysis, MetricQueryCheck, TracingProjectCheck
from airflow_provider.emulator.tracing import tracing_base_url
from airflow_provider.operators.deployment_service import FleetRolloutOperator
from tests.tasks.conftest import CONN_ENV, FakeStore, FakeTI, connection_json, make_context, seed
from tests.tasks.test_patch_notify import RecordingNotifier

TRAFFIC = 200.0


@pytest.fixture
def fleet(
    deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Any]:
    def start(count: int, bad: tuple[str, ...] = ()) -> Any:
        emulator = deployment_service_emulator_factory(
            data=seed(count), frozen_clock=False, build_seconds=0.3, ready_seconds=0.1
        )
        monkeypatch.setenv(
            CONN_ENV,
            connection_json(
                emulator.base_url,
                emulator.api_key,
                backoff_initial=0.01,
                backoff_max=0.02,
                tracing_base_url=tracing_base_url(emulator.base_url),
            ),
        )
        emulator.state.add_behaviour_rule(repo_ref="*", requests_per_second=TRAFFIC)
        for name in bad:
            deployment_id = emulator.state.find_deployment(name)["id"]
            emulator.state.set_behaviour(deployment_id, revision_id="next", error_rate=0.5, requests_per_second=TRAFFIC)
        return emulator

    return start


def fleet_op(**kwargs: Any) -> FleetRolloutOperator:
    options: dict[str, Any] = {
        "task_id": "fleet",
        "poll_interval": 0.1,
        "timeout": 30,
        "repo_ref": "v2",
        "rollback_on_failure": True,
        "analysis": Analysis(
            checks=[TracingProjectCheck(condition="< 0.05", min_run_count=5)],
            interval_seconds=0.3,
            count=2,
            preflight=False,  # the serving revisions have no traffic yet: these tests are about the notifications
        ),
        **kwargs,
    }
    return FleetRolloutOperator(**options)


def by_event(notifier: RecordingNotifier) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for _text, event in notifier.sent:
        found.setdefault(event["event"], []).append(event)
    return found


def test_a_fleet_that_lands_notifies_each_deployment_rolled_out(fleet: Callable[..., Any]) -> None:
    emulator = fleet(2)
    told = RecordingNotifier()
    events = {name: told for name in ("rolled_out", "analysis_failed", "rolled_back", "fleet_aborted")}

    table = fleet_op(deployment_names="app-0000,app-0001", notify=events).execute(make_context(FakeTI(), FakeStore()))

    sent = by_event(told)
    assert set(sent) == {"rolled_out"}
    landed = {row["name"]: row["to_revision"] for row in table}
    assert {event["deployment_name"]: event["revision_id"] for event in sent["rolled_out"]} == landed
    for event in sent["rolled_out"]:
        assert emulator.state.find_deployment(event["deployment_name"])["active_revision_id"] == event["revision_id"]
        assert event["verdict"] == "passed" and event["measurements"] and event["wave"] == "wave 1"
        assert f"/deployment-service/deployments/{event['deployment_id']}" in event["message"]


def test_a_fleet_stopped_by_its_analysis_notifies_the_failure_the_rollbacks_and_the_abort(
    fleet: Callable[..., Any],
) -> None:
    emulator = fleet(3, bad=("app-0000",))
    before = {name: emulator.state.find_deployment(name)["active_revision_id"] for name in ("app-0000", "app-0001")}
    failed, back, aborted, out = RecordingNotifier(), RecordingNotifier(), RecordingNotifier(), RecordingNotifier()

    with pytest.raises(AirflowFailException, match="fleet rollout stopped"):
        fleet_op(
            deployment_names="app-0000,app-0001,app-0002",
            canary=1,
            notify={"analysis_failed": failed, "rolled_back": back, "fleet_aborted": aborted, "rolled_out": out},
        ).execute(make_context(FakeTI(), FakeStore()))

    ((_text, analysis_failed),) = failed.sent
    assert analysis_failed["deployment_name"] == "app-0000" and analysis_failed["verdict"] == "failed"
    assert analysis_failed["wave"] == "canary" and analysis_failed["measurements"]
    ((_text, rolled_back),) = back.sent
    assert rolled_back["deployment_name"] == "app-0000"
    # The emulator's own state: the canary serves its previous revision again; the rest was never patched.
    assert emulator.state.find_deployment("app-0000")["active_revision_id"] != rolled_back["revision_id"]
    assert emulator.state.find_deployment("app-0001")["active_revision_id"] == before["app-0001"]
    ((text, abort),) = aborted.sent
    assert abort["event"] == "fleet_aborted" and abort["failed"] == "app-0000"
    assert "fleet rollout aborted" in text and "not_patched" in text
    assert out.sent == []


def test_an_analysis_refused_before_any_patch_notifies_preflight_failed(fleet: Callable[..., Any]) -> None:
    emulator = fleet(1)
    before = emulator.state.find_deployment("app-0000")["latest_revision_id"]
    refused = RecordingNotifier()
    check = MetricQueryCheck(query="up", condition="< 1", connection_id="no_such_prometheus")
    analysis = Analysis(checks=[check], interval_seconds=0.3, count=1)

    with pytest.raises(AirflowFailException):
        fleet_op(deployment_names="app-0000", analysis=analysis, notify={"preflight_failed": refused}).execute(
            make_context(FakeTI(), FakeStore())
        )

    ((text, event),) = refused.sent
    assert event["event"] == "preflight_failed" and "no_such_prometheus" in text and "nothing was patched" in text
    assert emulator.state.find_deployment("app-0000")["latest_revision_id"] == before


# ------------------------------------------------------------------------------------------ once per event
def test_a_retry_of_a_stopped_fleet_does_not_notify_again(fleet: Callable[..., Any]) -> None:
    """The first try stops on the failed canary and notifies; the retry finds the rollout decided and fails the same
    way, sending nothing again (each event at most once across tries)."""
    emulator = fleet(3, bad=("app-0000",))
    told = RecordingNotifier()
    events = {name: told for name in ("rolled_out", "analysis_failed", "rolled_back", "fleet_aborted")}
    store = FakeStore()

    def attempt(try_number: int) -> None:
        with pytest.raises(AirflowFailException, match="fleet rollout stopped"):
            fleet_op(deployment_names="app-0000,app-0001,app-0002", canary=1, notify=events).execute(
                make_context(FakeTI(try_number), store)
            )

    attempt(1)
    first = [event["event"] for _text, event in told.sent]
    assert sorted(first) == ["analysis_failed", "fleet_aborted", "rolled_back"]

    attempt(2)
    attempt(3)

    assert [event["event"] for _text, event in told.sent] == first
    assert len(told.calls) == 3
    assert emulator.state.find_deployment("app-0000")["active_revision_id"] != told.sent[0][1]["revision_id"]


def test_a_retry_after_a_try_that_failed_once_it_had_notified_sends_nothing_again(
    fleet: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first try lands both deployments and notifies, then fails emitting its asset events; the retry lands
    nothing again, succeeds, and each deployment's ``rolled_out`` was sent once."""
    emulator = fleet(2)
    told = RecordingNotifier()
    store = FakeStore()
    task = fleet_op(deployment_names="app-0000,app-0001", notify={"rolled_out": told})
    with monkeypatch.context() as broken:
        broken.setattr(
            "airflow_provider.tasks.fleet.result.emit_events",  # imported from there when the task uses it
            lambda *a, **k: (_ for _ in ()).throw(RuntimeError("asset events could not be written")),
        )
        with pytest.raises(RuntimeError):
            task.execute(make_context(FakeTI(1), store))
    assert len(told.calls) == 2

    table = fleet_op(deployment_names="app-0000,app-0001", notify={"rolled_out": told}).execute(
        make_context(FakeTI(2), store)
    )

    assert sorted(event["deployment_name"] for _text, event in told.sent) == ["app-0000", "app-0001"]
    for row in table:
        assert emulator.state.find_deployment(row["name"])["active_revision_id"] == row["to_revision"]
