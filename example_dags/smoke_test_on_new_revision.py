"""Smoke-test a deployment whenever a new revision of it goes live, whoever rolled it out.

The DAG is scheduled on the deployment's asset, watched by a
:class:`~airflow_provider.triggers.watcher.DeploymentEventTrigger` in the triggerer: a rollout
from Airflow (``rollout_after_build``), from the service's UI, its command-line client or a build on
push all start one run. The run reads the event (deployment, revision now serving, previous one, image
or git ref), checks that the service still serves that revision, and, when the deployment has a URL,
GETs it and fails on anything but a 2xx answer.

The watcher runs in the triggerer, so this DAG needs a running triggerer (``airflow triggerer`` or
``airflow standalone``); ``dag.test()`` does not run watchers.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

import httpx
from airflow.sdk import AssetWatcher, dag, task
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.assets import deployment_asset, deployment_event
from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.triggers.deployment_service import DeploymentEventTrigger

# The deployment to watch, by name (an id works too: deployment_asset(<id>) with deployment_ids=[<id>]).
# The demo and the tests shorten the poll interval through these environment variables.
DEPLOYMENT_NAME = os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_WATCHED_NAME", "checkout-api-staging")
POLL_INTERVAL = float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_WATCH_INTERVAL", "60"))
SETTLE_TIME = float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_SETTLE_TIME", "300"))

# [START deployment_watcher]
new_revision = deployment_asset(
    deployment_name=DEPLOYMENT_NAME,
    watchers=[
        AssetWatcher(
            name=f"{DEPLOYMENT_NAME}_revisions",
            trigger=DeploymentEventTrigger(
                deployment_names=[DEPLOYMENT_NAME],
                events=["revision_live"],
                poll_interval=POLL_INTERVAL,
                settle_time=SETTLE_TIME,  # announced once it has served this long, its judging over
            ),
        )
    ],
)


@dag(
    dag_id="smoke_test_on_new_revision",
    schedule=[new_revision],
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["deployment-service", "example"],
    doc_md=__doc__,
)
def smoke_test_on_new_revision() -> None:
    @task
    def smoke_test(triggering_asset_events: Any = None) -> list[dict[str, Any]]:
        """Check every revision that went live since the last run."""
        events = [
            event
            for asset_events in (triggering_asset_events or {}).values()
            for event in (deployment_event(item) for item in asset_events)
            if event is not None and event["kind"] == "revision_live"
        ]
        # [END deployment_watcher]
        if not events:
            raise AirflowFailException("started without a revision_live event")
        hook = DeploymentServiceHook()
        checked = []
        try:
            for event in events:
                deployment = hook.get_deployment(event["deployment_id"])
                serving = deployment.active_revision_id
                if serving != event["revision_id"]:
                    print(f"{deployment.name}: revision {event['revision_id']} was replaced by {serving}; skipped")
                    continue
                url = event.get("deployment_url")
                answer = "no URL to check"
                if url:
                    response = httpx.get(url, timeout=10.0, follow_redirects=True)
                    if not response.is_success:
                        raise AirflowFailException(f"GET {url} answered {response.status_code}")
                    answer = f"GET {url} -> {response.status_code}"
                config = event.get("source_revision_config") or {}
                built_from = config.get("image_uri") or config.get("repo_ref")
                print(
                    f"smoke test of {deployment.name}: revision {serving} ({built_from}) is live, "
                    f"was {event['previous_revision_id']}; {answer}"
                )
                checked.append({"deployment": deployment.name, "revision_id": serving, "check": answer})
        finally:
            hook.close()
        return checked

    smoke_test()


smoke_test_on_new_revision()
