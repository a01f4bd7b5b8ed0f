"""A deferred analysis's rounds in the Rollouts view's JSON (issue 30): the patch task's record in the metadata
database says "judging" without measurements (the rounds run in the triggerer, which cannot write it), and the
deployment's judging marker in the asset state store holds the rounds the trigger measured; the view's page of the
deployment shows "analysing" with them, for that task only, and only with the fleet tab's access."""

# ruff: noqa: F811 - the fixtures are imported from the module that defines them

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import pytest
from fastapi.testclient import TestClient

from airflow_provider.assets import deployment_asset_uri
from airflow_provider.decisions.judging_marker import JUDGING_KEY, with_marker, with_rounds
from airflow_provider.decisions.record import RECORD_KEY, Kind, entry, with_entries
from airflow_provider.models import PatchDeploymentRequest
from tests.conftest import connection_json
from tests.plugins.test_rollouts_access import (  # noqa: F401 - fixtures
    VISIBLE_DAG,
    add_dags_and_events,
    add_failed_run,
    dag_scoped_manager,
    fleet_hidden_manager,
    shown_text,
)

NAMES = ("deferred-rounds-gate", "deferred-rounds-hidden")
"""Deployments no other test touches: the view's last rollout of a deployment is its newest record in the shared
metadata database."""


@pytest.fixture
def rounds_service(deployment_service_emulator_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """An emulator with the deployments of :data:`NAMES` behind ``deployment_service_default``."""
    data = {"deployments": [{"name": name, "source": "codehost"} for name in NAMES]}
    server = deployment_service_emulator_factory(data=data)
    monkeypatch.setenv(
        "AIRFLOW_CONN_DEPLOYMENT_SERVICE_DEFAULT",
        connection_json(server.base_url, server.api_key, backoff_initial=0.01, backoff_max=0.02),
    )
    return server


def measurement(number: int) -> dict[str, Any]:
    return {
        "round": number,
        "check": "app health",
        "deployment_id": "d",
        "name": "app-0000",
        "at": datetime.now(timezone.utc).isoformat(),
        "value": 0.004 * number,
        "condition": "status 200..299",
        "verdict": "passed",
        "detail": "GET /health -> 200",
    }


def add_deferred_analysis(server: Any, deployment_id: str) -> tuple[str, str]:
    """A run of :data:`VISIBLE_DAG` whose patch task rolled a revision out and defers its analysis: its record
    (``rolled_out``, ``judging``) in ``task_state_store``, and the deployment's judging marker after the trigger's
    second round (plus a round-5 mark of another run's task). Returns the run id and the revision."""
    from airflow.models.asset import AssetModel
    from airflow.models.asset_state_store import AssetStateStoreModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    add_dags_and_events(deployment_id)
    previous = server.state.deployment(deployment_id)["active_revision_id"]
    request = PatchDeploymentRequest.model_validate({"source_revision_config": {"repo_ref": "v-analysed"}})
    revision = server.state.patch_deployment(deployment_id, request)["latest_revision_id"]
    run_id = f"manual__deferred_{uuid.uuid4().hex[:8]}"
    now = datetime.now(timezone.utc).timestamp()
    record = with_entries(
        None,
        [
            entry(Kind.ROLLED_OUT, deployment_id, revision, at=now - 60, try_number=1, previous_revision_id=previous),
            entry(Kind.JUDGING, deployment_id, revision, at=now - 30, try_number=1, steps=["analysis"]),
        ],
    )
    add_failed_run(run_id, "patch", RECORD_KEY, record)  # its state does not matter here
    by = {"dag_id": VISIBLE_DAG, "run_id": run_id, "task_id": "patch", "map_index": -1, "try_number": 1}
    marker = with_marker(None, revision_id=revision, state="judging", at=now - 30, until=now + 600, by=by)
    for number in (1, 2):
        analysis = {"verdict": "analysing", "round": number, "measurements": [measurement(n) for n in (1, 2)][:number]}
        marker = with_rounds(marker, revision_id=revision, analysis=analysis, at=now, until=now + 600, by=by) or marker
    uri = deployment_asset_uri(deployment_id)
    with create_session() as session:
        asset = session.scalar(select(AssetModel).where(AssetModel.uri == uri))
        assert asset is not None
        stored = session.get(AssetStateStoreModel, (asset.id, JUDGING_KEY))
        if stored is None:
            session.add(AssetStateStoreModel(asset_id=asset.id, key=JUDGING_KEY, value=json.dumps(marker)))
        else:
            stored.value = json.dumps(marker)
    return run_id, revision


def test_a_deferred_analysis_shows_analysing_with_the_rounds_measured_so_far(
    view: Callable[..., TestClient], token: Callable[[str], str], rounds_service: Any, dag_scoped_manager: Any
) -> None:
    deployment_id = rounds_service.admin.find_deployment(NAMES[0])["id"]
    run_id, revision = add_deferred_analysis(rounds_service, deployment_id)

    _row, page, _text = shown_text(view(cookie=token("op")), deployment_id)

    [ours] = [rollout for rollout in page["rollouts"] if rollout["run_id"] == run_id]
    assert (ours["outcome"], ours["revision_id"]) == ("analysing", revision)
    assert ours["analysis"]["verdict"] == "analysing" and ours["analysis"]["round"] == 2
    assert ours["analysis"]["measurements_total"] == 2
    assert ours["analysis"]["measurements"] == [
        "round 1 · app health · 0.004 (status 200..299): passed",
        "round 2 · app health · 0.008 (status 200..299): passed",
    ]
    [mark] = [m for r in page["revisions"] if r["id"] == revision for m in r["rollouts"] if m["run_id"] == run_id]
    assert (mark["role"], mark["label"]) == ("analysing", "analysing")
    assert mark["analysis"]["measurements"] == ours["analysis"]["measurements"]


def test_a_deferred_analysis_rounds_need_the_fleet_tabs_access(
    view: Callable[..., TestClient], token: Callable[[str], str], rounds_service: Any, fleet_hidden_manager: Any
) -> None:
    deployment_id = rounds_service.admin.find_deployment(NAMES[1])["id"]
    run_id, _revision = add_deferred_analysis(rounds_service, deployment_id)

    _row, page, text = shown_text(view(cookie=token("op")), deployment_id)

    [ours] = [rollout for rollout in page["rollouts"] if rollout["run_id"] == run_id]
    assert ours["outcome"] == "analysing" and ours["analysis"] is None
    assert "app health" not in text and "0.008" not in text


def test_a_marker_without_an_earlier_mark_is_written_and_a_verdict_is_never_hidden_by_a_late_round() -> None:
    by = {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1, "try_number": 1}
    analysis = {"verdict": "analysing", "round": 1, "measurements": [measurement(n) for n in range(1, 15)]}
    made = with_rounds(None, revision_id="rev", analysis=analysis, at=10.0, until=70.0, by=by)
    assert made is not None
    mark = made["revisions"]["rev"]
    assert (mark["state"], mark["until"], mark["by"]) == ("judging", 70.0, by)
    assert len(mark["analysis"]["measurements"]) == 10 and mark["analysis"]["measurements_total"] == 14
    assert with_rounds(made, revision_id="rev", analysis=analysis, at=11.0, until=70.0, by=by) is None  # unchanged
    landed = with_marker(made, revision_id="rev", state="landed", at=12.0, until=None, by=by)
    assert "analysis" not in landed["revisions"]["rev"]  # the verdict replaces the rounds
    assert with_rounds(landed, revision_id="rev", analysis=analysis, at=13.0, until=70.0, by=by) is None
