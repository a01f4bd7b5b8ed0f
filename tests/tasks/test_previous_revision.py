"""``RollbackDeploymentOperator(revision_id="previous")`` and ``ListRevisionsOperator`` against the emulator
(issue 33): "the previous revision" is the newest revision older than the serving one that was deployed,
a failed build skipped; a retry rolls back to what the first try resolved, never one revision further."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.models import PatchDeploymentRequest
from airflow_provider.operators.deployment_service import ListRevisionsOperator, RollbackDeploymentOperator
from tests.tasks.conftest import FakeStore, FakeTI, deployment_named, make_context
from tests.tasks.test_rollback import DOCKER, OLD_IMAGE, REDEPLOY_ROUTE, roll_out, serving

GOOD = "registry.example.com/acme/checkout-api:good"
BROKEN = "registry.example.com/acme/checkout-api:broken"
FAILED = "registry.example.com/acme/checkout-api:does-not-build"


def history(emulator: Any) -> tuple[dict[str, Any], str, str, str]:
    """The deployment after: GOOD served, a build that failed (never served), then BROKEN serving now."""
    dep = deployment_named(emulator, DOCKER)
    good = roll_out(emulator, dep["id"], image_uri=GOOD)
    emulator.state.fail_next_build(dep["id"], "BUILD_FAILED", "compile error")
    request = PatchDeploymentRequest.model_validate({"source_revision_config": {"image_uri": FAILED}})
    failed = str(emulator.state.patch_deployment(dep["id"], request)["latest_revision_id"])
    emulator.state.advance(2.5)
    broken = roll_out(emulator, dep["id"], image_uri=BROKEN)
    now = serving(emulator, dep["id"])
    assert now["active_revision_id"] == broken and now["source_revision_config"]["image_uri"] == BROKEN
    return dep, good, failed, broken


def previous_op(deployment_id: str, **kwargs: Any) -> RollbackDeploymentOperator:
    options = {"task_id": "rollback", "poll_interval": 0.05, "timeout": 30, "revision_id": "previous", **kwargs}
    return RollbackDeploymentOperator(deployment_id=deployment_id, **options)


def test_previous_is_the_revision_that_served_before_skipping_a_failed_build(
    emulator: Any, advance_later: Any, task_logs: Any
) -> None:
    dep, good, failed, broken = history(emulator)
    advance_later(emulator, 0.25, 0.02)
    ti = FakeTI()
    previous_op(dep["id"]).execute(make_context(ti, FakeStore()))
    now = serving(emulator, dep["id"])
    assert now["source_revision_config"]["image_uri"] == GOOD  # not the failed build, not the one before GOOD
    assert now["status"] == "READY" and now["active_revision_id"] == ti.xcoms["revision_id"]
    assert ti.xcoms["rolled_back_from"] == broken
    assert emulator.state.count(REDEPLOY_ROUTE) == 1
    logs = task_logs()
    assert f"revision_id='previous' is revision {good}" in logs
    assert f"skipped {failed} (BUILD_FAILED)" in logs


def test_a_retry_rolls_back_to_what_the_first_try_resolved(emulator: Any, advance_later: Any) -> None:
    dep, _, _, _ = history(emulator)
    advance_later(emulator, 0.25, 0.02)
    store = FakeStore()
    previous_op(dep["id"]).execute(make_context(FakeTI(), store))
    restored = serving(emulator, dep["id"])["active_revision_id"]
    # "previous" resolved again now would be BROKEN (it served before the restored revision): the retry must not
    previous_op(dep["id"]).execute(make_context(FakeTI(try_number=2), store))
    now = serving(emulator, dep["id"])
    assert now["active_revision_id"] == restored and now["source_revision_config"]["image_uri"] == GOOD
    assert emulator.state.count(REDEPLOY_ROUTE) == 1


def test_a_retry_without_a_store_refuses_previous(emulator: Any) -> None:
    dep, _, _, broken = history(emulator)
    with pytest.raises(AirflowFailException, match="revision_id='previous' on a retry without task_state_store"):
        previous_op(dep["id"]).execute(make_context(FakeTI(try_number=2)))
    assert serving(emulator, dep["id"])["active_revision_id"] == broken
    assert emulator.state.count(REDEPLOY_ROUTE) == 0


def test_no_previous_revision_fails_saying_so(emulator: Any) -> None:
    dep = deployment_named(emulator, DOCKER)
    only = [r for r in emulator.state.deployment(dep["id"])["revisions"]]
    assert len(only) == 1  # the seed data's one revision
    with pytest.raises(AirflowFailException, match="no revision served before the serving revision"):
        previous_op(dep["id"]).execute(make_context(FakeTI(), FakeStore()))
    assert emulator.state.count(REDEPLOY_ROUTE) == 0


def test_list_revisions_newest_first_with_status_and_build(emulator: Any, task_logs: Any) -> None:
    dep, good, failed, broken = history(emulator)
    rows = ListRevisionsOperator(task_id="revisions", deployment_name=DOCKER).execute(make_context())
    logs = task_logs()  # each revision logged, as the docstring says (issue 39)
    assert f"{broken} DEPLOYED (active) (latest): image_uri={BROKEN}" in logs, logs[-2000:]
    assert f"{failed} BUILD_FAILED: image_uri={FAILED}" in logs
    assert [row["id"] for row in rows[:3]] == [broken, failed, good]
    by_id = {row["id"]: row for row in rows}
    assert by_id[failed]["status"] == "BUILD_FAILED" and by_id[failed]["build"]["image_uri"] == FAILED
    assert by_id[broken]["active"] and by_id[broken]["latest"] and by_id[broken]["build"]["image_uri"] == BROKEN
    assert by_id[good]["status"] == "DEPLOYED" and not by_id[good]["active"]
    assert rows[-1]["build"]["image_uri"] == OLD_IMAGE
    assert [row["id"] for row in rows] == [r["id"] for r in reversed(emulator.state.deployment(dep["id"])["revisions"])]
    only_failed = ListRevisionsOperator(task_id="f", deployment_id=dep["id"], status="BUILD_FAILED").execute(
        make_context()
    )
    assert [row["id"] for row in only_failed] == [failed]
    with pytest.raises(AirflowFailException, match="not revision status"):
        ListRevisionsOperator(task_id="x", deployment_id=dep["id"], status="deployed").execute(make_context())
