"""Roll out a freshly built image to one deployment and wait until that exact revision is serving.

build -> patch the deployment named in the params (``image_uri`` and secrets) -> wait (deferrable)
until the *new revision* is active and the deployment READY -> report what is now serving.

Waiting on ``status == "READY"`` alone is wrong: the previous revision keeps the deployment READY while
the new one builds. The sensor waits for ``active_revision_id`` to equal the revision the patch created,
and fails fast if the build fails, the revision is superseded or the deployment is being deleted.

The payment token is a deployment secret taken from the Airflow Variable ``checkout_api_payment_token``
(or a secrets backend behind it), resolved when the patch task runs and masked in its logs: the value
never appears in this file, in rendered templates, in trigger arguments or in XCom.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from airflow.sdk import Param, XComArg, dag, task
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.hooks.deployment_service import DeploymentServiceHook
from airflow_provider.operators.deployment_service import PatchDeploymentOperator
from airflow_provider.sensors.deployment_service import DeploymentRolloutSensor

# Production pacing; the demo and the tests shorten it through these environment variables.
POLL_INTERVAL = float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_POLL_INTERVAL", "15"))
ROLLOUT_TIMEOUT = float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_ROLLOUT_TIMEOUT", "1800"))

# Every secret the deployment needs, not only the changed one: the spec does not show whether a patch's
# secrets merge with the deployment's or replace them (the emulator replaces them).
SECRETS = {"PAYMENT_API_TOKEN": {"variable": "checkout_api_payment_token"}}


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
    patch = PatchDeploymentOperator(
        task_id="patch_deployment",
        deployment_name="{{ params.deployment_name }}",
        image_uri=image_uri,
        secrets=SECRETS,
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
        hook = DeploymentServiceHook()
        try:
            deployment = hook.get_deployment(deployment_id)
        finally:
            hook.close()
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


rollout_after_build()
