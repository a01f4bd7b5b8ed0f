"""Roll out an LLM application, and keep the new revision only if its answers stay as good as before.

patch the deployment named in the params (``image_uri``) -> the analysis's **preflight** first measures every
check once on the revision serving now (the baseline; a check that cannot be measured refuses the rollout with
nothing sent) -> wait (deferrable) until the new revision is live -> analyse it in the triggerer: the
``correctness`` score an online evaluator gives its runs must not be shown more than 0.05 below the baseline's,
and its error rate not shown above the baseline's, each by an always-valid sequential test (99 % over the whole
analysis: a revision as good as its baseline is rolled back in at most 1 % of analyses, however many rounds) ->
landed once both rule the harm out, or rolled back to the revision that served before, the task failing with the
scores and the evidence.

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
# None: the preflight's baseline window is as long as the tests need (an hour first, up to a day).
BASELINE_WINDOW = float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_BASELINE_WINDOW", "0")) or None

# [START quality_analysis]
QUALITY = Analysis(
    checks=[
        # The correctness score of the runs since the revision went live: fails once shown more than 0.05 below the
        # baseline's (the revision serving before, measured by the preflight), passes once that is ruled out.
        TracingProjectCheck(
            metric="feedback.correctness", condition=">= baseline - 0.05", min_run_count=10, name="correctness"
        ),
        # No more errors than the baseline's: fails once a higher rate is shown, passes once a doubled one is ruled out.
        TracingProjectCheck(metric="error_rate", rate_test=RateTest(confidence=0.99), name="errors"),
    ],
    interval_seconds=ANALYSIS_INTERVAL,
    count=None,  # as many rounds as fit in bake_seconds: the analysis is the bake
    initial_delay_seconds=ANALYSIS_INTERVAL,  # let scored traffic reach the new revision first
    baseline_window_seconds=BASELINE_WINDOW,
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
