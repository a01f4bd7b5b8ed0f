"""Plan-only runs and the inputs refused before anything is sent (issue 39).

``plan_only=True`` on the patch and fleet tasks resolves, checks and measures exactly as a rollout would before its
first write, returns and logs the plan, and sends no write request: asserted on the emulator's request log. A
deployment being deleted is never patched; a fleet's canary larger than the fleet is refused; ``revision_id="prev"``
suggests ``"previous"``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.analysis import TracingProjectCheck
from airflow_provider.operators.deployment_service import (
    FleetRolloutOperator,
    PatchDeploymentOperator,
    RollbackDeploymentOperator,
)
from airflow_provider.tasks.execution_timeout import what_timeout_covers
from tests.tasks.conftest import FakeStore, FakeTI, make_context, scan_for_secret
from tests.tasks.test_fleet_analysis import fleet, fleet_op, ids_by_name  # noqa: F401 (the fixture)
from tests.tasks.test_patch_analysis import (
    NEW_IMAGE,
    analysis_of,
    context_with_events,
    emulator,  # noqa: F401 (the fixture)
    patch_op,
    set_next_revision_behaviour,
    svc,
)


def service_writes(emulator: Any) -> list[dict[str, Any]]:  # noqa: F811
    """Every request the emulator got that is not a read: the service's writes (the tracing service's statistics
    are read with POST, and are reads)."""
    return [
        entry
        for entry in emulator.admin.requests()
        if entry["method"] != "GET" and not entry["path"].startswith("/tracing/")
    ]


def test_a_plan_only_patch_checks_measures_and_sends_nothing(emulator: Any, task_logs: Any) -> None:  # noqa: F811
    before = svc(emulator)
    set_next_revision_behaviour(emulator, error_rate=0.0)
    store = FakeStore()
    task = patch_op(
        emulator,
        deferrable=False,
        plan_only=True,
        analysis=analysis_of(TracingProjectCheck(metric="error_rate", condition="< 0.05")),
    )
    plan = task.execute(context_with_events(FakeTI(), store))

    assert plan["plan_only"] is True and "nothing was sent" in plan["sent"]
    (wave,) = plan["waves"]
    (line,) = wave["deployments"]
    assert line["deployment_id"] == before["id"] and line["name"] == "svc"
    assert line["from"]["active_revision_id"] == before["active_revision_id"]
    assert line["from"]["source_revision_config"]["image_uri"] == before["source_revision_config"]["image_uri"]
    assert line["to"]["source_revision_config"]["image_uri"] == NEW_IMAGE
    assert "TOKEN" in line["to_text"] and "values not shown" in line["to_text"]
    scan_for_secret(plan)  # the secret the patch would send: by name only
    (measured,) = line["gate_now"]
    assert measured["verdict"] == "passed" and measured["value"] == 0.0, measured
    assert "tracing error_rate < 0.05" in plan["gate"]
    logs = task_logs()
    assert "Plan only: 1 deployment(s) in 1 wave(s)" in logs and "would patch" in logs
    assert service_writes(emulator) == []
    assert store.data == {}  # nothing recorded
    after = svc(emulator)
    assert after["latest_revision_id"] == before["latest_revision_id"] and len(after["revisions"]) == 1


def test_a_plan_only_patch_is_refused_as_the_rollout_would_be(emulator: Any) -> None:  # noqa: F811
    deployment = svc(emulator)
    task = patch_op(emulator, deferrable=False, plan_only=True, repo_ref="main")  # an image deployment: no repo_ref
    with pytest.raises(AirflowFailException, match="repo_ref"):
        task.execute(context_with_events(FakeTI()))
    emulator.state.set_status(deployment["id"], "AWAITING_DELETE")
    with pytest.raises(AirflowFailException) as refused:
        patch_op(emulator, deferrable=False, plan_only=True).execute(context_with_events(FakeTI()))
    assert "its status is AWAITING_DELETE, it is being deleted" in str(refused.value)
    assert service_writes(emulator) == []


def test_a_deployment_being_deleted_is_never_patched(emulator: Any) -> None:  # noqa: F811
    deployment = svc(emulator)
    emulator.state.set_status(deployment["id"], "AWAITING_DELETE")
    for check_source_rules in (True, False):
        task = patch_op(emulator, deferrable=False, check_source_rules=check_source_rules)
        with pytest.raises(AirflowFailException) as refused:
            task.execute(context_with_events(FakeTI(), FakeStore()))
        message = str(refused.value)
        assert "refusing to patch deployment 'svc'" in message and "AWAITING_DELETE" in message
        assert "status expected: any other than AWAITING_DELETE" in message
    assert service_writes(emulator) == []
    assert len(svc(emulator)["revisions"]) == 1


def test_a_plan_only_fleet_shows_its_waves_and_sends_nothing(fleet: Callable[..., Any]) -> None:  # noqa: F811
    emulator = fleet(4)  # noqa: F811
    ids = ids_by_name(emulator)
    emulator.state.set_status(ids["app-0003"], "AWAITING_DELETE")
    store = FakeStore()
    make = fleet_op(False, deployment_names=sorted(ids), canary=1, wave_size=2, max_failures=1, plan_only=True)
    plan = make().execute(make_context(FakeTI(), store))

    waves = {wave["name"]: wave["deployments"] for wave in plan["waves"]}
    assert list(waves) == ["canary", "wave 1", "wave 2"]
    assert [line["name"] for line in waves["canary"]] == ["app-0000"]
    assert [line["name"] for line in waves["wave 1"]] == ["app-0001", "app-0002"]
    for line in [*waves["canary"], *waves["wave 1"]]:
        assert line["to"]["source_revision_config"]["repo_ref"] == "v2", line
        assert (
            line["from"]["active_revision_id"] == emulator.state.deployment(line["deployment_id"])["active_revision_id"]
        )
    (going,) = waves["wave 2"]
    assert going["to"] is None and "AWAITING_DELETE" in going["refused"]
    assert service_writes(emulator) == []
    assert store.data == {}
    assert all(len(emulator.state.deployment(deployment_id)["revisions"]) == 1 for deployment_id in ids.values())


def test_a_canary_larger_than_the_fleet_is_refused(fleet: Callable[..., Any]) -> None:  # noqa: F811
    with pytest.raises(ValueError, match=r"canary=10 names 10 deployment\(s\) but the fleet has 2"):
        FleetRolloutOperator(task_id="fleet", deployment_names=["a", "b"], repo_ref="v2", canary=10)
    emulator = fleet(2)  # noqa: F811
    make = fleet_op(False, filters={"name_contains": "app-"}, canary=10)  # the fleet's size is known only when run
    with pytest.raises(AirflowFailException, match="the whole fleet would be the canary"):
        make().execute(make_context(FakeTI(), FakeStore()))
    assert service_writes(emulator) == []


def test_revision_id_prev_suggests_previous() -> None:
    deployment_id = "0b7f4d1e-0000-4000-8000-000000000001"
    with pytest.raises(ValueError) as refused:
        RollbackDeploymentOperator(task_id="back", deployment_id=deployment_id, revision_id="prev")
    message = str(refused.value)
    assert "revision_id must be a UUID" in message and "got 'prev'" in message
    assert 'did you mean "previous"' in message
    with pytest.raises(ValueError) as other:
        RollbackDeploymentOperator(task_id="back", deployment_id=deployment_id, revision_id="v1.2.3")
    assert "did you mean" not in str(other.value) and 'expected a revision UUID or "previous"' in str(other.value)
    rendered = RollbackDeploymentOperator(task_id="back", deployment_id=deployment_id, revision_id="{{ params.r }}")
    rendered.revision_id = "prevoius"  # as rendered: refused when the task runs, before any request
    with pytest.raises(AirflowFailException, match='did you mean "previous"'):
        rendered._checked_revisions()


def test_the_patch_task_says_what_its_timeout_covers() -> None:
    task = PatchDeploymentOperator(
        task_id="patch", deployment_name="svc", image_uri=NEW_IMAGE, timeout=10, bake_seconds=600
    )
    said = what_timeout_covers(task, task.analysis)
    assert said.startswith("timeout=10 s covers the new revision going live only")
    assert "then bake_seconds 600 s follow" in said and "no execution_timeout" in said
    assert "covers reaching live only" in " ".join((FleetRolloutOperator.__doc__ or "").split())
