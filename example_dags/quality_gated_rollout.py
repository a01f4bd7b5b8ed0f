"""Roll out an LLM application, and keep the new revision only if its answers stay as good as before.

patch the deployment named in the params (``image_uri``) -> the analysis's **preflight** first measures every
check once on the revision serving now (the baseline; a check that cannot be measured refuses the rollout with
nothing sent) -> wait (deferrable) until the new revision is live -> analyse it in the triggerer: the mean
``correctness`` score an online evaluator gives its runs must stay above 0.8 over at least 10 scored runs, and its
error rate must not be higher than the baseline's (a statistical test at 99 % confidence) -> landed, or rolled
back to the revision that served before, the task failing with the score and the condition.

A revision can serve every request without an error and still answer worse: only the scores the evaluator (or
the users) attach to its runs show it. The tracing project's ``feedback_stats`` carry them; the scores of another
key are ``feedback.<key>``.
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import Param, dag

from airflow_provider.analysis import Analysis, TracingProjectCheck
from airflow_provider.analysis.rate_test import RateTest
from airflow_provider.operators.deployment_service import PatchDeploymentOperator

# Production pacing; the demo and the tests shorten it through these environment variables.
POLL_INTERVAL = float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_POLL_INTERVAL", "15"))
ROLLOUT_TIMEOUT = float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_ROLLOUT_TIMEOUT", "1800"))
ANALYSIS_INTERVAL = float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_ANALYSIS_INTERVAL", "60"))
BAKE_SECONDS = float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_BAKE_SECONDS", "600"))

# [START quality_analysis]
QUALITY = Analysis(
    checks=[
        # The mean correctness score of the runs since the revision went live, over at least 10 scored runs.
        TracingProjectCheck(metric="feedback.correctness", condition="> 0.8", min_run_count=10, name="correctness"),
        # No more errors than the revision serving before (its baseline, measured by the preflight).
        TracingProjectCheck(
            metric="error_rate", rate_test=RateTest(confidence=0.99, tolerated_increase=0.0), name="errors"
        ),
    ],
    interval_seconds=ANALYSIS_INTERVAL,
    count=None,  # as many rounds as fit in bake_seconds: the analysis is the bake
    initial_delay_seconds=ANALYSIS_INTERVAL,  # let scored traffic reach the new revision first
)
# [END quality_analysis]


@dag(
    dag_id="quality_gated_rollout",
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
def quality_gated_rollout() -> None:
    PatchDeploymentOperator(
        task_id="roll_out",
        deployment_name="{{ params.deployment_name }}",
        image_uri="{{ params.image_repository }}:{{ params.version }}",
        wait_for_rollout=True,
        deferrable=True,
        analysis=QUALITY,
        bake_seconds=BAKE_SECONDS,
        rollback_on_failure=True,
        poll_interval=POLL_INTERVAL,
        timeout=ROLLOUT_TIMEOUT,
        retries=0,
    )


quality_gated_rollout()
