"""Roll out a freshly built image to one deployment and wait until that exact revision is serving.

build -> patch the deployment named in the params (``image_uri`` and secrets) -> wait (deferrable)
until the *new revision* is active and the deployment READY -> report what is now serving -> smoke test
the live revision (HTTP GET of the deployment's URL) -> when the smoke test fails, roll back to the
revision that served before the patch and wait until it serves again; the run then fails, saying so.

Waiting on ``status == "READY"`` alone is wrong: the previous revision keeps the deployment READY while
the new one builds. The sensor waits for ``active_revision_id`` to equal the revision the patch created,
and fails fast if the build fails, the revision is superseded or the deployment is being deleted.

The payment token is a deployment secret taken from the Airflow Variable ``checkout_api_payment_token``
(or a secrets backend behind it), resolved when the patch task runs and masked in its logs: the value
never appears in this file, in rendered templates, in trigger arguments or in XCom.
"""

from __future__ import annotations

import os
import time
from datetime import datetime
from typing import Any

import httpx
from airflow.sdk import Param, XComArg, dag, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.operators.deployment_service import PatchDeploymentOperator, RollbackDeploymentOperator
from airflow_provider.sensors.deployment_service import DeploymentRolloutSensor

# Production pacing; the demo and the tests shorten it through these environment variables.
POLL_INTERVAL = float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_POLL_INTERVAL", "15"))
ROLLOUT_TIMEOUT = float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_ROLLOUT_TIMEOUT", "1800"))

# Every secret the deployment needs, not only the changed one: the spec does not show whether a patch's
# secrets merge with the deployment's or replace them (the emulator replaces them).
SECRETS = {"PAYMENT_API_TOKEN": {"variable": "checkout_api_payment_token"}}
SMOKE_TEST_ATTEMPTS = 3


@dag(
    dag_id="rollout_after_build",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["deployment-service", "example"],
    params={
        "deployment_name": Param("checkout-api-staging", type="string", description="deployment to roll out"),
        "image_repository": Param("registry.example.com/acme/checkout-api", type="string"),
        "version": Param("1.0.0", type="string", description="version the build step tags the image with"),
    },
    doc_md=__doc__,
)
def rollout_after_build() -> None:
    @task
    def build_image(params: dict[str, Any]) -> str:
        """Stand-in for the CI build: returns the image URI the build pushed."""
        return f"{params['image_repository']}:{params['version']}"

    image_uri = build_image()

    # The deployment is looked up by its exact name when the task runs (the list filter matches substrings;
    # the hook pages through every match and keeps the exact one, failing on none or several).
    # wait_for_rollout=False: the patch returns once the service accepted it, and the sensor below waits for
    # the revision in the triggerer (left at its default, True, the patch task itself would wait).
    patch = PatchDeploymentOperator(
        task_id="patch_deployment",
        deployment_name="{{ params.deployment_name }}",
        image_uri=image_uri,
        secrets=SECRETS,
        wait_for_rollout=False,
    )

    wait = DeploymentRolloutSensor(
        task_id="wait_for_rollout",
        deployment_id=XComArg(patch, key="deployment_id"),
        revision_id=XComArg(patch, key="revision_id"),
        deferrable=True,
        poll_interval=POLL_INTERVAL,
        timeout=ROLLOUT_TIMEOUT,
    )

    @task
    def verify_rollout(deployment_id: str, revision_id: str, image_uri: str) -> dict[str, Any]:
        """Read the deployment back and report what is serving now; fail if it is not the new build."""
        with DeploymentServiceHook() as hook:
            deployment = hook.get_deployment(deployment_id)
        serving = deployment.source_revision_config.image_uri
        if deployment.active_revision_id != revision_id or serving != image_uri:
            raise AirflowFailException(
                f"{deployment.name} serves revision {deployment.active_revision_id} ({serving}), "
                f"expected {revision_id} ({image_uri})"
            )
        print(f"{deployment.name} now serves {serving} as revision {revision_id} (status {deployment.status.value})")
        return {"deployment": deployment.name, "revision_id": revision_id, "image_uri": serving}

    verified = verify_rollout(
        deployment_id=XComArg(patch, key="deployment_id"),
        revision_id=XComArg(patch, key="revision_id"),
        image_uri=image_uri,
    )
    wait >> verified

    # [START smoke_test_and_rollback]
    @task
    def smoke_test(deployment_url: str | None, revision_id: str) -> None:
        """GET the live revision's URL; anything but a 2xx (three tries) fails the task and rolls back."""
        if not deployment_url:
            raise AirflowSkipException("the service reports no URL for this deployment: nothing to smoke test")
        answer = "no answer"
        for attempt in range(1, SMOKE_TEST_ATTEMPTS + 1):
            try:
                response = httpx.get(deployment_url, timeout=10, follow_redirects=True)
                if response.is_success:
                    print(f"Smoke test of revision {revision_id}: {deployment_url} answered {response.status_code}")
                    return
                answer = f"{response.status_code} {response.reason_phrase}"
            except httpx.HTTPError as err:
                answer = f"{type(err).__name__}: {err}"
            if attempt < SMOKE_TEST_ATTEMPTS:
                time.sleep(1)
        raise AirflowFailException(f"smoke test of revision {revision_id} failed: {deployment_url} answered {answer}")

    smoke = smoke_test(XComArg(patch, key="deployment_url"), XComArg(patch, key="revision_id"))

    # Runs only when the smoke test (or the rollout before it) failed. Redeploys the build that served
    # before the patch (or patches its config back, from the patch task's previous_source_revision_config
    # XCom) with the resource_spec that served with it (previous_resource_spec: without it the rollback
    # cannot tell whether the change touched resource_spec, and says "rolled back ... except: resource_spec");
    # refuses when someone rolled out a newer revision meanwhile; never re-sends secrets.
    roll_back = RollbackDeploymentOperator(
        task_id="roll_back",
        deployment_id=XComArg(patch, key="deployment_id"),
        revision_id=XComArg(patch, key="previous_active_revision_id"),
        rolling_back_from=XComArg(patch, key="revision_id"),
        source_revision_config=XComArg(patch, key="previous_source_revision_config"),
        resource_spec=XComArg(patch, key="previous_resource_spec"),
        trigger_rule="one_failed",
        deferrable=True,
        poll_interval=POLL_INTERVAL,
        timeout=ROLLOUT_TIMEOUT,
    )

    @task
    def report_rollback(deployment_id: str, revision_id: str, rolled_back_from: str, path: str) -> None:
        """The rollback worked: fail the run anyway (the new build did not land) and say what serves now."""
        if path == "none":
            raise AirflowFailException(f"the rollout did not land; revision {revision_id} kept serving")
        raise AirflowFailException(
            f"revision {rolled_back_from} failed its smoke test and was rolled back: deployment {deployment_id} "
            f"serves the previous build again as revision {revision_id} ({path})"
        )

    verified >> smoke >> roll_back
    report_rollback(
        XComArg(roll_back, key="deployment_id"),
        XComArg(roll_back, key="revision_id"),
        XComArg(roll_back, key="rolled_back_from"),
        XComArg(roll_back, key="rollback_path"),
    )
    # [END smoke_test_and_rollback]


rollout_after_build()
