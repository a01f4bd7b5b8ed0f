"""After one build, roll the release out to every dev deployment of a service, then to prod.

list dev deployments (by tag value and type) -> plan one patch per deployment -> patch + wait for each,
mapped with ``.expand_kwargs()`` and deferrable (all waiting rollouts share one batched poller in the
triggerer: ceil(N/100) list requests per interval, whatever N) -> only if every dev rollout landed, the
same for prod -> summary.

Each deployment gets the revision field its source needs: ``repo_ref`` (the release's git tag) for
codehost deployments, ``image_uri`` for image-based ones, ``source_tarball_path`` for uploaded source.
A failed rollout fails its own mapped task, with the deployment's name in the message, and prod is not
touched.

Only deployments that are ``READY`` when a stage starts are rolled out (one still being created or
going away is left alone); the plan task logs which ones. The list operator stops at ``max_results``
(1000 by default) with a warning in its log: raise it for a larger fleet.

This is the one-task-per-deployment alternative: 2 task instances per deployment, every deployment of a
stage at once, each failure visible as its own task. For a canary, waves, a failure budget, rollback of
the wave that broke it and a person's approval, in one task per stage, see ``progressive_rollout``
(``FleetRolloutOperator``).
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from airflow.sdk import Param, dag, task
from airflow.sdk.exceptions import AirflowFailException

from airflow_provider.operators.deployment_service import ListDeploymentsOperator, PatchDeploymentOperator

# Production pacing; the demo and the tests shorten it through these environment variables.
POLL_INTERVAL = float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_POLL_INTERVAL", "15"))
ROLLOUT_TIMEOUT = float(os.environ.get("DEPLOYMENT_SERVICE_EXAMPLE_ROLLOUT_TIMEOUT", "1800"))

RELEASE_TAG_VALUE_ID = "13947cbe-457c-441f-a7e0-7c554c9fae02"


def revision_config_for(deployment: dict[str, Any], params: dict[str, Any]) -> dict[str, str]:
    """The ``source_revision_config`` that deploys this release on a deployment of this source."""
    version, service = params["version"], params["service"]
    source = deployment["source"]
    if source == "codehost":
        return {"repo_ref": f"v{version}"}
    if source in ("external_docker", "internal_docker"):
        return {"image_uri": f"{params['image_registry']}/{service}:{version}"}
    if source == "internal_source":
        return {"source_tarball_path": f"uploads/{service}/{version}.tar.gz"}
    raise AirflowFailException(
        f"deployment {deployment['name']!r} has source {source!r}, which this release cannot patch"
    )


@dag(
    dag_id="deploy_fleet_after_build",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["deployment-service", "example"],
    params={
        "service": Param("acme-release", type="string", description="artifact name the build produced"),
        "version": Param("1.0.0", type="string"),
        "image_registry": Param("registry.example.com/acme", type="string"),
        "tag_value_id": Param(RELEASE_TAG_VALUE_ID, type="string", description="tag value of the fleet"),
    },
    doc_md=__doc__,
)
def deploy_fleet_after_build() -> None:
    @task
    def build_release(params: dict[str, Any]) -> str:
        """Stand-in for the CI build of the release."""
        return f"{params['service']} {params['version']}"

    def rollout_stage(stage: str) -> tuple[Any, Any]:
        """List the stage's READY deployments of the fleet, then patch and wait for each (mapped)."""
        listed = ListDeploymentsOperator(
            task_id=f"list_{stage}_deployments",
            tag_value_ids="{{ params.tag_value_id }}",
            deployment_type=stage,
            status="READY",
        )

        @task(task_id=f"plan_{stage}_patches")
        def plan(deployments: list[dict[str, Any]], params: dict[str, Any]) -> list[dict[str, Any]]:
            plans = [
                {"deployment_id": d["id"], "source_revision_config": revision_config_for(d, params)}
                for d in deployments
            ]
            print(f"{stage}: rolling out to {', '.join(d['name'] for d in deployments) or 'no deployments'}")
            return plans

        rollouts = PatchDeploymentOperator.partial(
            task_id=f"roll_out_{stage}",
            wait_for_rollout=True,
            deferrable=True,
            poll_interval=POLL_INTERVAL,
            timeout=ROLLOUT_TIMEOUT,
            retries=0,
        ).expand_kwargs(plan(listed.output))
        return listed, rollouts

    built = build_release()
    list_dev, dev_rollouts = rollout_stage("dev")
    list_prod, prod_rollouts = rollout_stage("prod")
    built >> list_dev
    dev_rollouts >> list_prod  # prod starts only when every dev rollout succeeded

    @task
    def summary(dev: list[dict[str, Any]], prod: list[dict[str, Any]]) -> dict[str, Any]:
        """One line per deployment: what is serving now."""
        rows = {
            d["name"]: {
                "revision": d["active_revision_id"],
                **{k: v for k, v in d["source_revision_config"].items() if v},
            }
            for d in [*dev, *prod]
        }
        for name, row in rows.items():
            print(f"{name}: {row}")
        return {"deployments": len(rows), "serving": rows}

    summary(dev_rollouts.output, prod_rollouts.output)


deploy_fleet_after_build()
