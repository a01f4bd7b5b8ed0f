"""Promote to production the image a staging deployment serves, once Airflow's own rollout judged it good.

The DAG is scheduled on the staging deployment's **name** asset, watched by a
:class:`~airflow_provider.triggers.watcher.DeploymentEventTrigger` in the triggerer. The watcher announces a
new revision (``revision_live``) only after it has served for ``settle_time`` seconds and no rollout of this
provider is still judging it (a ``PatchDeploymentOperator`` with an analysis, verify or bake); a revision such
a rollout rejected is never announced, and an announced revision that is rolled back later fires
``revision_rolled_back``. Each event says what the rollout concluded (``verdict``), whether one is still
judging it (``judging``) and which task instance judged it (``judged_by``).

This DAG promotes only what an Airflow rollout **passed** (``verdict`` ``landed`` or ``passed``, ``judging``
``false``) and that still serves: it patches the production deployment to the same image. A revision rolled
out by hand (no verdict), one whose judging is unknown, and a rollback's revision (``rolled_back``) are
reported and left alone: the run succeeds with its ``promote`` task skipped.

The watcher runs in the triggerer, so this DAG needs a running triggerer; ``dag.test()`` does not run watchers.
Why the name asset: tasks of this provider emit their own ``revision_live`` on the deployment's **id** asset
when they land a revision, without any settle time; a DAG scheduled on the id asset would be started by those
too (and Airflow may fold a task's event and a watcher's arriving together into one run). Tasks never emit on
a name asset, so every event here is the watcher's. The id asset is still named, as an inlet of
``settled_revision``: the watcher reads the judging marker from its asset state store, which exists only for
an asset some DAG names.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from airflow.sdk import AssetWatcher, dag, task

from airflow_provider.assets import deployment_asset, deployment_event
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.operators.deployment_service import PatchDeploymentOperator
from airflow_provider.triggers.deployment_service import DeploymentEventTrigger

# The emulator's billing-worker-dev and billing-worker-prod; the tests and the demo keep these defaults.
STAGING_NAME = os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_STAGING_NAME", "billing-worker-dev")
STAGING_ID = os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_STAGING_ID", "14c00c00-ebf8-4e83-b5c4-9ee51897fc1a")
PRODUCTION_ID = os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_PRODUCTION_ID", "7253b31a-4338-4b3a-bae5-dcc36f9ccf0b")
POLL_INTERVAL = float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_WATCH_INTERVAL", "60"))
SETTLE_TIME = float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_SETTLE_TIME", "300"))
PROMOTED_VERDICTS = ("landed", "passed")
"""What an Airflow rollout concluded of the revisions this DAG promotes."""

# [START settled_watcher]
staging = deployment_asset(
    deployment_name=STAGING_NAME,  # only the watcher emits on a name asset
    watchers=[
        AssetWatcher(
            name="staging_settled_revisions",
            trigger=DeploymentEventTrigger(
                deployment_names=[STAGING_NAME],
                events=["revision_live", "revision_rolled_back"],
                poll_interval=POLL_INTERVAL,
                settle_time=SETTLE_TIME,  # a revision must serve this long before it is announced
                wait_for_verdict=True,  # and not while a rollout of this provider still judges it
            ),
        )
    ],
)


@dag(
    dag_id="promote_settled_revision",
    schedule=[staging],
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["deployment-service", "example"],
    doc_md=__doc__,
)
def promote_settled_revision() -> None:
    @task.short_circuit(inlets=[deployment_asset(STAGING_ID)])  # the id asset: where rollouts mark their judging
    def settled_revision(triggering_asset_events: Any = None) -> dict[str, Any] | None:
        """The newest announced revision an Airflow rollout passed and that still serves, or ``None`` (skip)."""
        events = [
            event
            for asset_events in (triggering_asset_events or {}).values()
            for event in (deployment_event(item) for item in asset_events)
            if event is not None
        ]
        for event in events:
            print(
                f"{event['kind']}: revision {event['revision_id']} (was {event['previous_revision_id']}), "
                f"verdict {event.get('verdict')}, judging {event.get('judging')}, by {event.get('judged_by')}"
            )
        candidates = [
            event
            for event in events
            if event["kind"] == "revision_live"
            and event.get("judging") is False
            and event.get("verdict") in PROMOTED_VERDICTS
        ]
        if not candidates:
            print("nothing to promote: no revision an Airflow rollout passed")
            return None
        event = candidates[-1]
        hook = DeploymentServiceHook()
        try:
            serving = hook.get_deployment(event["deployment_id"])
        finally:
            hook.close()
        if serving.active_revision_id != event["revision_id"]:
            print(f"revision {event['revision_id']} no longer serves ({serving.active_revision_id} does): skipped")
            return None
        image = (event.get("source_revision_config") or {}).get("image_uri")
        if not image:
            print(f"revision {event['revision_id']} has no image to promote: skipped")
            return None
        return {"revision_id": event["revision_id"], "image_uri": image}

    # [END settled_watcher]
    promote = PatchDeploymentOperator(
        task_id="promote",
        deployment_id=PRODUCTION_ID,
        image_uri="{{ ti.xcom_pull(task_ids='settled_revision')['image_uri'] }}",
        wait_for_rollout=False,
    )
    settled_revision() >> promote


promote_settled_revision()
