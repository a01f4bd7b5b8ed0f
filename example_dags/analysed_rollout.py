"""Roll out an image, and let what the application does decide whether it stays.

patch the deployment named in the params (``image_uri``) -> wait (deferrable) until the new revision is
active and the deployment READY -> analyse it in the triggerer for the bake window: every interval, the
deployment's tracing project must show an error rate under 5 % over at least 20 runs since the revision
went live, and its health endpoint must answer 2xx within 2 s -> landed (the asset event carries the
verdict and the measurements), or rolled back to the revision that served before the patch (its build and
its ``resource_spec``) and the task fails naming the check, the value measured and the condition ->
report reads the verdict from the XCom ``analysis``, whichever way it went (and fails the run unless the
revision passed).

A revision can go live ``READY`` and still fail a fifth of its requests; the control plane never sees
that, the tracing project does. A measurement that cannot be taken (the tracing service answers 5xx,
fewer runs than ``min_run_count``, the health endpoint times out) is *inconclusive*: more than
``inconclusive_limit`` of them and the revision is rolled back too, the message saying "inconclusive".

The tracing project is read with the deployment-service connection's API key, at the base URL in its extra
``tracing_base_url`` (``TracingProjectCheck(connection_id=...)`` names another connection when they differ).
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from airflow.sdk import Param, dag, task
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.analysis import Analysis, HttpCheck, TracingProjectCheck
from airflow_provider.operators.deployment_service import PatchDeploymentOperator

# Production pacing; the demo and the tests shorten it through these environment variables.
POLL_INTERVAL = float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_POLL_INTERVAL", "15"))
ROLLOUT_TIMEOUT = float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_ROLLOUT_TIMEOUT", "1800"))
ANALYSIS_INTERVAL = float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_ANALYSIS_INTERVAL", "60"))
BAKE_SECONDS = float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_BAKE_SECONDS", "600"))

# [START analysis]
ANALYSIS = Analysis(
    checks=[
        # The deployment's own tracing project (named like the deployment): runs since the revision went live.
        TracingProjectCheck(metric="error_rate", condition="< 0.05", min_run_count=20),
        # The app's health endpoint, at the URL the service shows for the deployment.
        HttpCheck(url="{custom_url}/health", status_range=(200, 299), max_latency_seconds=2.0, name="health"),
    ],
    interval_seconds=ANALYSIS_INTERVAL,
    count=None,  # as many rounds as fit in bake_seconds: the analysis is the bake
    failure_limit=1,  # one failed measurement of a check fails the revision
    inconclusive_limit=1,  # a second measurement that cannot be taken makes the verdict inconclusive
    initial_delay_seconds=ANALYSIS_INTERVAL,  # let traffic reach the new revision first
)
# [END analysis]


@dag(
    dag_id="analysed_rollout",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["deployment-service", "example"],
    params={
        "deployment_name": Param("checkout-api-staging", type="string", description="deployment to roll out"),
        "image_repository": Param("registry.example.com/acme/checkout-api", type="string"),
        "version": Param("1.0.0", type="string", description="the image tag to roll out"),
    },
    doc_md=__doc__,
)
def analysed_rollout() -> None:
    roll_out = PatchDeploymentOperator(
        task_id="roll_out",
        deployment_name="{{ params.deployment_name }}",
        image_uri="{{ params.image_repository }}:{{ params.version }}",
        wait_for_rollout=True,
        deferrable=True,
        analysis=ANALYSIS,
        bake_seconds=BAKE_SECONDS,
        rollback_on_failure=True,
        poll_interval=POLL_INTERVAL,
        timeout=ROLLOUT_TIMEOUT,
        retries=0,
    )

    @task(trigger_rule="all_done")
    def report(ti: Any = None) -> dict[str, Any]:
        """Say what the analysis concluded (the XCom ``analysis``), landed or rolled back; fail (and so the
        run) unless it passed."""
        result = ti.xcom_pull(task_ids="roll_out", key="analysis") or {}
        revision = ti.xcom_pull(task_ids="roll_out", key="revision_id")
        verdict = result.get("verdict", "not analysed (the revision never went live)")
        print(f"revision {revision}: analysis {verdict}; {result.get('reason') or ''}")
        for measurement in result.get("measurements") or []:
            print(
                f"  round {measurement['round']} {measurement['check']}: {measurement['value']} "
                f"(needs {measurement['condition']}) -> {measurement['verdict']}"
            )
        if verdict != "passed":
            raise AirflowFailException(f"revision {revision} was not kept: {result.get('reason') or verdict}")
        return {"revision_id": revision, "verdict": verdict, "failing_check": result.get("failing_check")}

    roll_out >> report()


analysed_rollout()
